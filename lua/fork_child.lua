-- fork_child: create a child session of a live parent, inheriting its last N messages.
-- KEYS: root child_meta child_msgs child_ids log *members
-- ARGV: head parent_key child_key agent config max_messages inherit call_token events event kid staged staged_generation step
-- OK: created_at tree_generation elements event_id fork_point context_tokens members
-- KEYS[1..7] the tree's root keys (the parent's; see the prelude)
-- KEYS[8] child meta hash   KEYS[9] child msgs list   KEYS[10] child ids hash
-- KEYS[11] the tree's event log stream   KEYS[12 ..] the tree's members as the caller knows them
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] parent key   ARGV[6] child key   ARGV[7] agent name   ARGV[8] config JSON
-- ARGV[9] max messages (0 = all)   ARGV[10] N messages to inherit   ARGV[11] call token
--   (meta field 'ct'; the child's 'token' is it and the fork's server time, as create's)
-- ARGV[12 .. 15] the events group (see log_event)   ARGV[16] the event's fields (JSON members)
-- ARGV[17] the caller's key id for the parent ('' = cleartext)
-- ARGV[18] inherited messages staged in KEYS[9] by copy_range (0: copy them here), and
-- ARGV[19] the parent's generation they were copied from
-- ARGV[20] the most messages this call copies itself (more: {STAGE, g, h, n} of the parent)
-- Reply: {OK, created_at_us, tg, the child's stored elements (false when they were staged),
--        the event's id ('' for a retry of this call or with no log), the fork point (see
--        'fp' below), the tokens the child holds (false: its token sums are unknown),
--        member...}
--        | {PARENT_GONE, NOT_FOUND or EXPIRED} | {EXISTS} | {KEY_CHANGED, k, dk} | {WRONG_TYPE, i, type}
--        | {TREE_CHANGED, ...} | {STALE} (the parent changed while messages were staged)
--        | {STAGE, g, h, n} (too many to inherit in one call: copy_range them first)
-- Events: 'fork', only when this call created the child (a retry answers OK silently).
-- Inherited messages are stored with an all-zero digest: they are never merged back. The
-- child's meta field 'fp' holds the prefix ('{"id":"<id>",') of the parent's newest message at
-- the fork ('' for an empty parent): where it was forked, which a rewind of the parent reads.
-- The child's token sums are the parent's for the messages it inherits (their fields copied,
-- in the parent's frame); inherited in steps (staged), the child's sums are unknown.
local bad = wrong_type({'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'hash', 'list',
  'hash', 'stream'})
if bad then return bad end
local staged = tonumber(ARGV[18])
if redis.call('EXISTS', KEYS[8]) == 1 then
  local c = redis.call('HMGET', KEYS[8], 'ct', 'created_at', 'token', 'g', 'h', 'n')
  if (c[1] or c[3]) == ARGV[11] then  -- 'token' alone: an earlier layout's
    local reply = tree_changed(redis.call('HGET', KEYS[1], 'tg'))
    reply[1] = OK
    table.insert(reply, 2, c[2])
    local held = false  -- a long one: the caller reads it in steps (get_child)
    if redis.call('LLEN', KEYS[9]) <= tonumber(ARGV[20]) then held = redis.call('LRANGE', KEYS[9], 0, -1) end
    table.insert(reply, 4, held)
    table.insert(reply, 5, '')
    table.insert(reply, 6, redis.call('HGET', KEYS[8], 'fp') or '')
    local fr = sums_frame(10, nil, nil, nil, c[4] or '0', whole(c[5]), whole(c[6]))
    table.insert(reply, 7, fr and fr[3] - fr[2] or false)
    return reply
  end
  return {EXISTS}
end
local f = redis.call('HMGET', KEYS[1], 'v', 'k', 'x', 'tg', 'g', 'h', 'n')
if not f[1] then
  local st = gone(1, 2, 3, 5)
  if st[1] == DAMAGED then return st end
  return {PARENT_GONE, st[1]}
end
if f[1] ~= SCHEMA then return {DAMAGED, 1, 'version', f[1]} end
if (f[2] or '') ~= ARGV[17] then return key_changed(f[2]) end
local us, now = clock()
local ttl = tonumber(ARGV[1])
local extend_now = due(f[3], ttl, now)
if extend_now and (f[4] or '0') ~= ARGV[3] then return tree_changed(f[4]) end
local g, h, n = positions(f[5], f[6], f[7], 2)
if not g then return h end
if staged > 0 and (tostring(g) ~= ARGV[19] or redis.call('LLEN', KEYS[9]) ~= staged) then
  return {STALE}
end
local kc = redis.call('HGET', KEYS[1], 'kc')
local kids = redis.call('ZCARD', KEYS[6])
if kc and tonumber(kc) ~= kids then return {DAMAGED, 6, 'members', kids, tonumber(kc)} end
local want = tonumber(ARGV[10])
if staged == 0 and math.min(want, n - h) > tonumber(ARGV[20]) then return {STAGE, g, h, n} end

local tg = tonumber(f[4] or '0') + 1
local top = redis.call('LINDEX', KEYS[2], -1)
local fp = top and string.match(top, '^{"id":"[^"]*",') or ''
redis.call('HSET', KEYS[8], 'v', '1', 'key', ARGV[6], 'parent', ARGV[5], 'agent', ARGV[7],
  'config', ARGV[8], 'max', ARGV[9], 'created_at', us, 'token', ARGV[11] .. '@' .. us,
  'ct', ARGV[11], 'g', 0, 'h', 0, 'fp', fp)
local sums  -- the child's token sums' frame: {to, B} (nil: unknown), and its tokens
local k = math.min(math.max(want, 0), n - h)
local fr = staged == 0 and sums_frame(3, nil, nil, nil, g, h, n)
if staged == 0 and k == 0 then
  sums = {0, 0, 0}  -- empty: sums of its own
elseif fr then  -- the inherited messages' entries: their fields copied as they are
  local first = n - k
  local B = fr[2]
  if first > h then B = sums_tools().at(3, first - 1 + fr[1]) end
  if B then sums = {first + fr[1], B, fr[3] - B} end
end
if staged == 0 then
  redis.call('DEL', KEYS[9], KEYS[10])
  if want > 0 then
    local copy = {}
    for _, m in ipairs(redis.call('LRANGE', KEYS[2], -want, -1)) do copy[#copy + 1] = INHERITED .. m end
    push_all(KEYS[9], copy)
  end
  if sums and k > 0 then
    for c = math.floor(sums[1] / SUM_SPAN), math.floor((n - 1 + fr[1]) / SUM_SPAN) do
      local v = redis.call('HGET', KEYS[3], 's' .. c)
      if v then redis.call('HSET', KEYS[10], 's' .. c, v) end
    end
  end
else
  redis.call('DEL', KEYS[10])
end
redis.call('HSET', KEYS[10], 'w', '0')  -- the child's id window, empty
if sums then redis.call('HSET', KEYS[10], 'sg', 0, 'so', sums[1], 'sb', sums[2]) end
redis.call('HSET', KEYS[8], 'n', redis.call('LLEN', KEYS[9]))
redis.call('HSET', KEYS[1], 'updated_at', us, 'tg', tg)
redis.call('ZADD', KEYS[4], now, ARGV[5])
local last = redis.call('ZREVRANGE', KEYS[6], 0, 0, 'WITHSCORES')
local seq = 1
if last[2] then seq = tonumber(last[2]) + 1 end
redis.call('ZADD', KEYS[6], seq, ARGV[6])
redis.call('HSET', KEYS[1], 'kc', redis.call('ZCARD', KEYS[6]))  -- so that an evicted kids shows
local x = f[3]
if extend_now then x = extend(12, ttl, tonumber(ARGV[2]), now) end
join_tree(x, {6, 8, 9, 10})
local id = log_event(11, 12, 'fork', ARGV[16], now)
local reply = tree_changed(tg)
reply[1] = OK
table.insert(reply, 2, us)
local held = false  -- inherited in steps: the caller reads them in steps too (get_child)
if staged == 0 then held = redis.call('LRANGE', KEYS[9], 0, -1) end
table.insert(reply, 4, held)
table.insert(reply, 5, id)
table.insert(reply, 6, fp)
table.insert(reply, 7, sums and sums[3] or false)
return reply
