-- adk_append_event: one Google ADK event (RedisSessionService.append_event): refuse a caller
-- whose session is older than the stored one, then append the event, set the session's state
-- entries and last_update_time, and set the app and user state entries (creating their
-- records when missing), all in one script.
-- KEYS: root turn log usage *shared_records *members
-- ARGV: head max_messages session_key max_metadata_bytes schema_version last_update_field last_update_time newest_event_id events tag element fence budget max_tokens #metadata #shared
-- OK: stored created event_ids
-- KEYS[1..7] the session tree's root keys (see the prelude)   KEYS[8] the session's turn key
-- KEYS[9] the event log stream of the session's tree (and of the shared records: one slot)
-- KEYS[10] the usage totals of the prefix (see append_message)
-- KEYS[11 ..] first six keys per shared state record (r of them, ARGV[22+m]; none on a cluster,
--   where they live in other slots): meta hash, msgs list, ids hash, expiry marker, kids zset,
--   done zset; then the session tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] max messages (0 = all)   ARGV[6] session key (index member)
-- ARGV[7] max metadata bytes (0 = no limit)   ARGV[8] schema version
-- ARGV[9] the metadata field of last_update_time ('m:adk:last_update_time')
-- ARGV[10] the caller's last_update_time (seconds, a decimal string)
-- ARGV[11] the message id of the caller's newest event ('' = it holds none)
-- ARGV[12 .. 15] the events group (see log_event)
-- ARGV[16] the event's tag (codec.message_tag: 8-byte id digest, token count, usage: the
--   usage is added to the session's and the prefix's totals, the count to its token sums)
-- ARGV[17] the event as stored (message JSON)
-- ARGV[18] the turn's value the append is made through ('' = none: not fenced)
-- ARGV[19] the store's usage budget in tokens (0 = none; the session's own, meta field 'ub',
--   comes first): a session whose usage has reached it takes no event (OVER_BUDGET)
-- ARGV[20] the cap on the tokens the session holds (0 = none; as append_message's ARGV[12])
-- ARGV[21] m = number of the session's metadata arguments (field/value pairs), ARGV[22 .. 21+m]
-- ARGV[22+m] r = number of shared records, then per shared record: its key (index member),
--   its 'create' event's fields (JSON members), a call token,
--   q = number of base field/value arguments (written only when the record is created), them,
--   p = number of its metadata arguments (field/value pairs: 'm:' .. name, value), them
-- Reply: {OK, 1, created, event id...} (created: one character per shared record, '1' when
--        this call created it; the 'create' event's id of each record created, in order)
--        | {OK, 0, ''} (the event id was stored before: nothing changed)
--        | {STALE} | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k, dk[, i]} | {WRONG_TYPE, i, type}
--        | {TREE_CHANGED, ...} | {DAMAGED, ...} | {TOO_LARGE, bytes, limit} | {TURN_LOST}
--        | {OVER_BUDGET, usage, budget}
-- Events: 'create' for each shared record this call created.
-- Stale: the stored last_update_time is later than the caller's and the newest stored event
-- is not the caller's newest (ADK's DatabaseSessionService check for sessions without a
-- storage marker). The id window is looked in first, so a retry of an applied call answers
-- OK and is not taken for a stale writer. Cleartext only: a sealed session or record answers
-- KEY_CHANGED (the Python side uses the store's own path for encrypted stores). Every check
-- (types, staleness, sizes) is made before the first write (ZADD, which Redis refuses when it
-- is out of memory).
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'h', 'n', 'tg', 'mb', 'ui', 'uo', 'ub', 'ur',
  'g')
if failed(f) then return refusal(f, 1) end
if not f[1] then return gone(1, 2, 3, 5) end
if f[1] ~= SCHEMA then return {DAMAGED, 1, 'version', f[1]} end
if (f[2] or '') ~= '' then return key_changed(f[2]) end
local us, now = clock()
local ttl = tonumber(ARGV[1])
local grace = tonumber(ARGV[2])
local extend_now = due(f[3], ttl, now)
if extend_now and (f[6] or '0') ~= ARGV[3] then return tree_changed(f[6]) end
local g, h, n = positions(nil, f[4], f[5], 2, 1)
if g == nil then return h end
local digest, spent = string.sub(ARGV[16], 1, 8), nil
local t, u = tag_parts(ARGV[16])
if u then spent = {u} end
local tokens = {t}
local win, stop = open_window(3, f[5], 16, 16, 2)
if not win then return stop end
if has(win, digest) then return {OK, 0, ''} end
local fenced = fence_refused(8, ARGV[18]) or log_refused(9)  -- a lost turn first: it says why
if fenced then return fenced end

local stored = tonumber(redis.call('HGET', KEYS[1], ARGV[9]) or '')
if stored and stored > tonumber(ARGV[10]) then
  local last = redis.call('LINDEX', KEYS[2], -1)
  local id = last and string.match(last, '^{"id":"([^"]*)"')
  if ARGV[11] == '' or id ~= ARGV[11] then return {STALE} end
end
local spend = usage_damaged(1, {f[8], f[9], f[11], f[10]}) or budget_refused(f[8], f[9], f[10], ARGV[19])
if spend then return spend end  -- after the stale check: a stale caller is told so first
local totals
if spent then
  totals, spend = read_totals(10)
  if spend then return spend end
end

local m = tonumber(ARGV[21])
local limit = tonumber(ARGV[7])
local mb = metadata_after(KEYS[1], f[7], 22, 21 + m, 1, 0)
if limit > 0 and mb > limit then return {TOO_LARGE, mb, limit} end

local r = tonumber(ARGV[22 + m])
local shared = {}
local at = 23 + m
for j = 1, r do
  local b = 10 + 6 * (j - 1)
  local rec = {meta = b + 1, msgs = b + 2, ids = b + 3, mark = b + 4, kids = b + 5, done = b + 6,
    member = at, payload = at + 1, token = at + 2}
  local q = tonumber(ARGV[at + 3])
  rec.qfirst, rec.qlast = at + 4, at + 3 + q
  local p = tonumber(ARGV[at + 4 + q])
  rec.pfirst, rec.plast = at + 5 + q, at + 4 + q + p
  at = at + 5 + q + p
  local s = redis.pcall('HMGET', KEYS[rec.meta], 'v', 'k', 'x', 'mb')
  if failed(s) then return refusal(s, rec.meta) end
  if s[1] then
    if (s[2] or '') ~= '' then return {KEY_CHANGED, s[2], '', rec.meta} end
    rec.x = s[3]
    rec.mb = metadata_after(KEYS[rec.meta], s[4], rec.pfirst, rec.plast, 1, 0)
  else
    if redis.call('EXISTS', KEYS[rec.meta]) == 1 then return {DAMAGED, rec.meta, 'foreign'} end
    rec.fresh = true
    rec.mb = 0
    for i = rec.pfirst, rec.plast, 2 do rec.mb = rec.mb + #ARGV[i] + #ARGV[i + 1] end
  end
  if limit > 0 and rec.mb > limit then return {TOO_LARGE, rec.mb, limit} end
  shared[j] = rec
end

local fr  -- the token sums' frame (nil: unknown), and the head after the trims
if g == false then fr = sums_frame(3, nil, nil, nil, f[12] or '0', h, n) end
local max = tonumber(ARGV[5])
local h2 = h
if max > 0 and n + 1 - h > max then h2 = n + 1 - max end
local S  -- the token sums' tools, where the trim by tokens built them
fr, h2, S = sums_trim(3, fr, h, n, tokens, tonumber(ARGV[20]), h2)

local z = redis.pcall('ZADD', KEYS[4], now, ARGV[6])
if failed(z) then return refusal(z, 4) end
local created = n == h  -- the list is made anew: it joins the tree's deadline
local sums, base = sums_write(3, fr, h, n, tokens, h2, S)
redis.call('RPUSH', KEYS[2], ARGV[17])
add(win, {digest}, tonumber(ARGV[4]))
sums_into(win, sums)
save_window(win)
if totals then
  local add = spent_usage(spent)
  set_figures(1, {f[8], f[9], f[11]}, add)
  set_figures(10, totals, add)
end
n = n + 1
if h2 > h then redis.call('LTRIM', KEYS[2], h2 - h, -1) end
h = h2
if g then
  redis.call('HSET', KEYS[1], 'updated_at', us, 'n', n, 'h', h, 'g', g, 'mb', mb)
else
  redis.call('HSET', KEYS[1], 'updated_at', us, 'n', n, 'h', h, 'mb', mb)
end
sums_base(3, fr, sums, base)
hcall_from('HSET', KEYS[1], 22, 21 + m)
if extend_now then
  extend(11 + 6 * r, ttl, grace, now)
elseif created then
  join_tree(f[3], {2})
end

local made, ids = '', {}
for j = 1, r do
  local rec = shared[j]
  local x
  if rec.fresh then
    if rec.plast >= rec.pfirst then  -- a record is made only to hold entries
      redis.call('DEL', KEYS[rec.msgs], KEYS[rec.ids], KEYS[rec.mark], KEYS[rec.kids],
        KEYS[rec.done])
      redis.call('HSET', KEYS[rec.meta], 'v', ARGV[8], 'h', 0, 'n', 0, 'g', 0, 'updated_at', us,
        'created_at', us, 'token', ARGV[rec.token], 'tg', 0, 'mb', rec.mb)
      hcall_from('HSET', KEYS[rec.meta], rec.qfirst, rec.qlast)
      hcall_from('HSET', KEYS[rec.meta], rec.pfirst, rec.plast)
      redis.call('HSET', KEYS[rec.ids], 'w', '0')
      redis.call('ZADD', KEYS[4], now, ARGV[rec.member])
      if ttl > 0 then x = now + ttl + math.floor(ttl / 16) end
      ids[#ids + 1] = log_event(9, 12, 'create', ARGV[rec.payload], now)
      made = made .. '1'
    else
      made = made .. '0'
    end
  else
    redis.call('HSET', KEYS[rec.meta], 'updated_at', us, 'mb', rec.mb)
    hcall_from('HSET', KEYS[rec.meta], rec.pfirst, rec.plast)
    redis.call('ZADD', KEYS[4], now, ARGV[rec.member])
    if due(rec.x, ttl, now) then x = now + ttl + math.floor(ttl / 16) end
    made = made .. '0'
  end
  if x then  -- the record's deadline (it has no children: nothing forks a state record)
    redis.call('HSET', KEYS[rec.meta], 'x', x)
    redis.call('SET', KEYS[rec.mark], x, 'PXAT', x + grace)
    for _, i in ipairs({rec.meta, rec.msgs, rec.ids, rec.kids, rec.done}) do
      redis.call('PEXPIREAT', KEYS[i], x)
    end
  end
end
return {OK, 1, made, unpack(ids)}
