-- create: store a new session with its history, atomically; two creators -> one wins.
-- KEYS: root stage log usage
-- ARGV: head session_key call_token events event event_type schema_version kid #meta tokens #sums staged *messages
-- OK: created_at index_created event_id due expired again
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] a staging list (see ARGV[16+2n])
-- KEYS[9] the tree's event log stream   KEYS[10] the usage totals of the prefix (see
--   append_message): a 'create' adds its history's usage (meta fields ui, uo, ur), a 'branch'
--   (which spends nothing: its messages' usage was counted when they were first appended)
--   does not
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] (unused: a new tree has no members)
-- ARGV[4] id window   ARGV[5] session key (index member)
-- ARGV[6] call token (a retry of this very call finds it and answers OK again; meta field
--   'ct'). The session's token (meta field 'token', which readers compare to know the session
--   they hold is this one) is the call token and the creation's server time: a session made
--   again under the key, by a call of the same idempotency key too, has another token.
-- ARGV[7 .. 10] the events group (see log_event)   ARGV[11] the event's fields (JSON members)
-- ARGV[12] the event's type ('create'; 'branch' for store.branch)
-- ARGV[13] schema version   ARGV[14] key id the session is sealed with ('' = cleartext)
-- ARGV[15] n = number of meta field/value pairs that follow, ARGV[16 .. 15+2n]
-- ARGV[16+2n] the history's token total ('' = its token sums unknown)
-- ARGV[17+2n] k = number of the history's token-sums field/value pairs that follow (the
--   prelude's Token sums, offset 0, as codec.token_sums builds them), ARGV[18+2n .. 17+2n+2k]
-- ARGV[18+2n+2k] s = the history's length when it is staged in KEYS[8] (stage_push), else 0
-- ARGV[19+2n+2k ..] message pairs: tag (codec.message_tag: 8-byte id digest first; the caller
--   sums the history's usage into the meta fields ui, uo, ur), message JSON (distinct
--   digests); with a staged history, only the tags of its newest messages (the id window's),
--   no JSON
-- Reply: {OK, created_at_us, 1 if the index key was created by this call else 0, the create
--        event's id ('' with no log, or for a retry of this call), the number of index
--        entries whose tree is due to have expired (the store reaps them: reap_expired), the
--        'expire' event's id of an earlier tree under the key (see Events; false: none), 1 for
--        a retry of this call (it wrote nothing: the session as stored is the call's) else 0}
--        | {EXISTS} | {WRONG_TYPE, i, type} | {STALE} (the staging list is not what the caller
--        staged) | {DAMAGED, 1, 'foreign'} (KEYS[1] is a hash without a schema version: another
--        program's)
-- Events: ARGV[12]'s ('create', 'branch'), only when the session was created by this call;
-- before it 'expire' when the index still lists an earlier tree under the key that ended unseen (expired or evicted:
-- its meta hash is gone, and no reaper logged it yet).
-- Leftovers of an earlier session under the key (its expiry marker, keys that outlived an
-- eviction) are removed first: the new session is fresh. The fields every write reads come
-- first in the meta hash (Redis finds a field of a small hash by a linear scan).
local bad = wrong_type({'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset'}) or log_refused(9)
if bad then return bad end
if redis.call('EXISTS', KEYS[1]) == 1 then
  local f = redis.call('HMGET', KEYS[1], 'ct', 'v', 'created_at', 'token')
  if (f[1] or f[4]) == ARGV[6] then return {OK, f[3], 0, '', 0, false, 1} end  -- 'token' alone: an earlier layout's
  if not f[2] then return {DAMAGED, 1, 'foreign'} end  -- not a session: never taken over
  return {EXISTS}
end

local us, now = clock()
local n = tonumber(ARGV[15])
local total = tonumber(ARGV[16 + 2 * n])
local k = tonumber(ARGV[17 + 2 * n])
local first = 19 + 2 * n + 2 * k  -- the first message's tag
local staged = tonumber(ARGV[first - 1])
local count = (#ARGV - first + 1) / 2
if staged > 0 then
  if redis.call('LLEN', KEYS[8]) ~= staged then return {STALE} end
  count = staged
end
local mb = 0
local u = {0, 0, 0}
local spend = {ui = 1, uo = 2, ur = 3}
for i = 16, 15 + 2 * n, 2 do
  local p = string.sub(ARGV[i], 1, 2)
  if p == 'm:' or p == 'e:' then mb = mb + #ARGV[i] + #ARGV[i + 1] end
  local at = spend[ARGV[i]]
  if at then u[at] = tonumber(ARGV[i + 1]) or 0 end
end
local totals  -- a 'create' adds its history's usage to the prefix's totals
if ARGV[12] == 'create' and u[1] + u[2] + u[3] > 0 then
  local refused
  totals, refused = read_totals(10)
  if refused then return refused end
end
local ttl = tonumber(ARGV[1])
local head = {'v', ARGV[13]}
if ARGV[14] ~= '' then head[3], head[4] = 'k', ARGV[14] end
local x
if ttl > 0 then
  x = now + ttl + math.floor(ttl / 16)
  head[#head + 1], head[#head + 2] = 'x', x
end
for _, v in ipairs({'h', 0, 'n', count, 'g', 0, 'updated_at', us}) do head[#head + 1] = v end
redis.call('HSET', KEYS[1], unpack(head))
redis.call('HSET', KEYS[1], 'created_at', us, 'token', ARGV[6] .. '@' .. us, 'ct', ARGV[6], 'tg', 0,
  'mb', mb)
redis.call('DEL', KEYS[2], KEYS[3], KEYS[5], KEYS[6], KEYS[7])
hcall_from('HSET', KEYS[1], 16, 15 + 2 * n)
local win = {key = 3, count = 0, dirty = {}}
local digests, elements = {}, {}
if staged > 0 then
  for i = first, #ARGV do digests[#digests + 1] = string.sub(ARGV[i], 1, 8) end
  redis.call('RENAME', KEYS[8], KEYS[2])
  redis.call('PERSIST', KEYS[2])  -- the staging list's TTL: the tree's deadline follows
else
  for i = first, #ARGV, 2 do
    digests[#digests + 1] = string.sub(ARGV[i], 1, 8)
    elements[#elements + 1] = ARGV[i + 1]
  end
  push_all(KEYS[2], elements)
end
add(win, digests, tonumber(ARGV[4]))
save_window(win)
if total then  -- the token sums (see the prelude): offset 0, nothing before the head
  redis.call('HSET', KEYS[3], 'sg', 0, 'so', 0, 'sb', 0)
  hcall_from('HSET', KEYS[3], 18 + 2 * n, 17 + 2 * n + 2 * k)
end
if totals then set_figures(10, totals, u) end
if x then expire_tree(#KEYS + 1, x, tonumber(ARGV[2])) end
local fresh_index = 1 - redis.call('EXISTS', KEYS[4])
local expired = false
if redis.call('ZSCORE', KEYS[4], ARGV[5]) then expired = log_event(9, 7, 'expire', ARGV[11], now) end
redis.call('ZADD', KEYS[4], now, ARGV[5])
local due = 0
if ttl > 0 then  -- entries older than any live tree's deadline: trees the reaper is due to log
  due = redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. (now - ttl - math.floor(ttl / 16)))
end
return {OK, us, fresh_index, log_event(9, 7, ARGV[12], ARGV[11], now), due, expired, 0}
