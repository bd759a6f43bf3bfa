-- merge_child: fold a child into its parent in one step: a summary message, or the child's
-- own messages in order; mark the child merged and prune merged children beyond the newest K.
-- KEYS: root child_meta child_msgs child_ids stage log *members
-- ARGV: head max_messages parent_key child_key call_token call_digest mode summary_tag summary events event kid keep_merged staged_generation staged_tail staged_child staged_length max_tokens
-- OK: merged_at appended tree_generation event_id members
-- KEYS[1..7] the tree's root keys (the parent's; see the prelude)
-- KEYS[8] child meta hash   KEYS[9] child msgs list   KEYS[10] child ids hash
-- KEYS[11] the merge's staging list (see merge_stage)   KEYS[12] the tree's event log stream
-- KEYS[13 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] parent max messages (0 = all)   ARGV[6] parent key   ARGV[7] child key
-- ARGV[8] call token   ARGV[9] its digest   ARGV[10] 'summary', 'history' or 'staged'
-- ARGV[11] the summary's tag (codec.message_tag: id digest, token count)   ARGV[12] summary element
-- ARGV[13 .. 16] the events group (see log_event)   ARGV[17] the event's fields (JSON members)
-- ARGV[18] the caller's key id for the parent ('' = cleartext)
-- ARGV[19] K: merged children kept whole
-- ARGV[20 .. 23] staged: the parent's generation and tail position the staging list was built
--   from, how many of the child's messages it holds after the parent's, and its length;
--   'history': ARGV[22] the most child messages merged in one call (more: {STAGE, n})
-- ARGV[24] the parent's cap on the tokens it holds (0 = none; as append_message's ARGV[12])
-- Reply: {OK, merged_at_us, messages appended to the parent, tg, the event's id ('' for a
--        retry of this call or with no log), member...}
--        | {NOT_FOUND} (child) | {PRUNED, merged_at} | {MERGED} | {PARENT_GONE, st}
--        | {KEY_CHANGED, k, dk} | {WRONG_TYPE, i, type} | {TREE_CHANGED, ...} | {DAMAGED, ...} | {STALE}
--        | {STAGE, n} (the child holds n messages, too many for one call: merge_stage)
-- Events: 'merge', only when this call merged. A retry of this very call (its token digest in
-- the parent's id window) answers OK again; any other second merge gets MERGED. Inherited
-- messages and messages whose ids the parent's window holds are not appended again. The
-- child's usage (meta fields ui, uo, ur) is added to the parent's.
-- Only a caller that knows the tree's members prunes, or moves the tree's deadline. With
-- 'staged', KEYS[11] holds the parent's messages up to ARGV[21], then the child's (merge_stage
-- built it under this call's lease); the parent's messages appended since go after them and
-- the staging list replaces the parent's list in one step (a new generation of the list).
-- Token sums (see the prelude): the messages appended to the parent add their counts (the
-- summary's from its tag, the child's from the child's sums) and the parent is trimmed to
-- ARGV[5] messages and ARGV[24] tokens; after a staged merge, or with the child's sums
-- unknown, the parent's are unknown.
local bad = wrong_type({'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'hash', 'list',
  'hash', 'list', 'stream'})
if bad then return bad end
local f = redis.call('HMGET', KEYS[1], 'v', 'k', 'x', 'tg', 'g', 'h', 'n', 'ui', 'uo', 'ur')
local mode = ARGV[10]
local extra = {ARGV[9]}
local summary_digest = string.sub(ARGV[11], 1, 8)
if mode == 'summary' then extra[2] = summary_digest end
local win, stop = open_window(3, f[7], 1, 0, 1, extra)
if not win then return stop end
local c = redis.call('HMGET', KEYS[8], 'parent', 'merged_at', 'g', 'h', 'n', 'mt', 'mx', 'ma',
  'ui', 'uo', 'ur')
if has(win, ARGV[9]) then  -- this very call merged already: answer as it did
  local at = c[2] or redis.call('ZSCORE', KEYS[7], 'm' .. ARGV[7])
  if at then
    local reply = tree_changed(f[4])
    reply[1] = OK
    table.insert(reply, 2, at)
    table.insert(reply, 3, tonumber(c[8] or '0'))  -- 0 once the child's record was pruned
    table.insert(reply, 5, '')
    return reply
  end
end
local st = child_state(c, ARGV[6], ARGV[7])
if st == MERGED then return {MERGED} end
if st ~= OK then return st end
local us, now = clock()
if leased(c[6], c[7], now, ARGV[8]) then return {MERGED} end
if not f[1] then
  st = gone(1, 2, 3, 5)
  if st[1] == DAMAGED then return st end
  return {PARENT_GONE, st[1]}
end
if f[1] ~= SCHEMA then return {DAMAGED, 1, 'version', f[1]} end
if (f[2] or '') ~= ARGV[18] then return key_changed(f[2]) end
local ttl = tonumber(ARGV[1])
local fresh = (f[4] or '0') == ARGV[3]  -- the caller named the tree's members as they are
local extend_now = due(f[3], ttl, now)
if extend_now and not fresh then return tree_changed(f[4]) end
local g, h, n = positions(f[5], f[6], f[7], 2)
if not g then return h end
local cg, ch, cn = positions(c[3], c[4], c[5], 9)
if not cg then return ch end
if mode == 'history' and cn - ch > tonumber(ARGV[22]) then return {STAGE, cn - ch} end
local bad = usage_damaged(1, {f[8], f[9], f[10]}) or usage_damaged(8, {c[9], c[10], c[11]})
if bad then return bad end

-- The digests of a child's stored elements, the window's buckets of those read (one HMGET).
local function digests_of(items)
  local ds = {}
  for i, m in ipairs(items) do ds[i] = string.sub(m, 1, 8) end
  load_buckets(win, ds)
  return ds
end

local digests, elements, taken, tokens = {}, {}, {}, {}
local pfr = sums_frame(3, nil, nil, nil, g, h, n)  -- the parent's token sums (nil: unknown)
if mode == 'summary' then
  if not has(win, summary_digest) then
    digests[1], elements[1], tokens[1] = summary_digest, ARGV[12], (tag_parts(ARGV[11]))
  end
elseif mode == 'history' then
  local items = redis.call('LRANGE', KEYS[9], 0, -1)
  local ds = digests_of(items)
  local cfr = sums_frame(10, nil, nil, nil, cg, ch, cn)
  if not cfr then pfr = nil end  -- the child's counts unknown: so are the parent's sums
  local S = sums_tools()
  local before = cfr and S.before(cfr, ch, cn, {}, S.reader(10))
  for i, m in ipairs(items) do
    local d = ds[i]
    if d ~= INHERITED and not taken[d] and not has(win, d) then
      digests[#digests + 1] = d
      elements[#elements + 1] = string.sub(m, 9)
      taken[d] = true
      if pfr then  -- its count: the child's counts before the next one less before it
        local p = ch + i - 1
        local e, e2 = before(p), cfr[3]
        if p + 1 < cn then e2 = before(p + 1) end
        if e and e2 then tokens[#tokens + 1] = e2 - e else pfr = nil end
      end
    end
  end
elseif c[6] ~= ARGV[8] or tostring(g) ~= ARGV[20] or tonumber(ARGV[21]) > n
    or redis.call('LLEN', KEYS[11]) ~= tonumber(ARGV[23]) then
  return {STALE}  -- staged: the lease was lost, or the parent's list changed meanwhile
end

local added = #elements
local max = tonumber(ARGV[5])
local h2 = h  -- the parent's head after the trims, by count and by tokens
local S  -- the token sums' tools, where the trim by tokens built them
if mode ~= 'staged' then
  if max > 0 and n + added - h > max then h2 = n + added - max end
  pfr, h2, S = sums_trim(3, pfr, h, n, tokens, tonumber(ARGV[24]), h2)
else
  pfr = nil
end
redis.call('HSET', KEYS[8], 'merged_at', us)
-- the sub-agent's spend is its parent's (its figures checked above, before the first write)
if c[9] or c[10] or c[11] then
  set_figures(1, {f[8], f[9], f[10]},
    {tonumber(c[9] or '0'), tonumber(c[10] or '0'), tonumber(c[11] or '0')})
end
if mode == 'staged' then
  push_all(KEYS[11], redis.call('LRANGE', KEYS[2], math.max(tonumber(ARGV[21]), h) - h, -1))
  redis.call('RENAME', KEYS[11], KEYS[2])
  g, h, n, added = g + 1, 0, redis.call('LLEN', KEYS[2]), tonumber(ARGV[22])
  for _, d in ipairs(digests_of(redis.call('LRANGE', KEYS[9], -tonumber(ARGV[4]), -1))) do
    if d ~= INHERITED and not taken[d] and not has(win, d) then
      digests[#digests + 1] = d
      taken[d] = true
    end
  end
end
local sums, base = false, nil
if mode ~= 'staged' then
  sums, base = sums_write(3, pfr, h, n, tokens, h2, S)
  push_all(KEYS[2], elements)
  n = n + added
  if h2 > h then redis.call('LTRIM', KEYS[2], h2 - h, -1) end
  h = h2
elseif max > 0 and n - h > max then
  redis.call('LTRIM', KEYS[2], -max, -1)
  h = n - max
end
redis.call('HSET', KEYS[8], 'ma', added)  -- what a retry of this call answers
digests[#digests + 1] = ARGV[9]
add(win, digests, math.max(tonumber(ARGV[4]), max))
sums_into(win, sums)
save_window(win)
sums_base(3, true, sums, base)  -- none written: unknown from then on (a staged merge, the child's)
redis.call('DEL', KEYS[10])
redis.call('HDEL', KEYS[8], 'mt', 'mx')

-- Keep the newest K merged children whole; older ones leave a tombstone only. A caller that
-- does not know the tree's members leaves that to the next merge (so that merges under
-- contention need no second round trip): the tree keeps at most K plus a few for a moment.
local merged = {}
for i = 13, #KEYS, 3 do
  local m = redis.call('HMGET', KEYS[i], 'key', 'merged_at')
  if m[1] and m[2] and m[1] ~= ARGV[7] then merged[#merged + 1] = {tonumber(m[2]), m[1], i} end
end
merged[#merged + 1] = {tonumber(us), ARGV[7], 8}
table.sort(merged, function(a, b) return a[1] > b[1] end)
local tg = tonumber(f[4] or '0')
local pruned = 0
local keep = tonumber(ARGV[19])
if not fresh then keep = math.max(keep, #merged) end
for j = keep + 1, #merged do
  local at, key, i = merged[j][1], merged[j][2], merged[j][3]
  redis.call('UNLINK', KEYS[i], KEYS[i + 1], KEYS[i + 2])
  redis.call('ZREM', KEYS[6], key)
  tombstone('m', key, at)
  tg = tg + 1
  pruned = pruned + 1
end
if pruned > 0 then redis.call('HSET', KEYS[1], 'kc', redis.call('ZCARD', KEYS[6])) end
redis.call('HSET', KEYS[1], 'updated_at', us, 'g', g, 'h', h, 'n', n, 'tg', tg)
redis.call('ZADD', KEYS[4], now, ARGV[6])
if extend_now then
  extend(13, ttl, tonumber(ARGV[2]), now)
else
  join_tree(f[3], {2, 7})
end
local id = log_event(12, 13, 'merge', ARGV[17], now)
local reply = tree_changed(tg)
reply[1] = OK
table.insert(reply, 2, us)
table.insert(reply, 3, added)
table.insert(reply, 5, id)
return reply
