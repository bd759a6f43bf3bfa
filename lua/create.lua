-- create: store a new session with its history, atomically; two creators -> one wins.
-- KEYS[1..7] the tree's root keys (see the prelude)
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] (unused: a new tree has no members)
-- ARGV[4] id window   ARGV[5] session key (index member)
-- ARGV[6] call token (a retry of this very call finds it and answers OK again)
-- ARGV[7] events channel ('' = none)   ARGV[8] 'create' event JSON
-- ARGV[9] n = number of meta field/value pairs that follow, ARGV[10 .. 9+2n]
-- ARGV[10+2n ..] message pairs: 8-byte id digest, message JSON (distinct digests)
-- Reply: {OK, created_at_us, 1 if the index key was created by this call else 0} | {EXISTS}
--        | {WRONG_TYPE, i}
-- Events: 'create' on ARGV[7], only when the session was created by this call.
-- Index entries of sessions that expired are pruned from KEYS[4] here. Leftovers of an earlier
-- session under the key (its expiry marker, keys that outlived an eviction) are removed first:
-- the new session is fresh.
local bad = wrong_type({'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset'})
if bad then return {WRONG_TYPE, bad} end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'token') == ARGV[6] then
    return {OK, redis.call('HGET', KEYS[1], 'created_at'), 0}
  end
  return {EXISTS}
end

local us, now = clock()
local n = tonumber(ARGV[9])
local count = (#ARGV - 9 - 2 * n) / 2
local mb = 0
for i = 10, 9 + 2 * n, 2 do
  local p = string.sub(ARGV[i], 1, 2)
  if p == 'm:' or p == 'e:' then mb = mb + #ARGV[i] + #ARGV[i + 1] end
end
redis.call('HSET', KEYS[1], 'created_at', us, 'updated_at', us, 'token', ARGV[6],
  'g', 0, 'h', 0, 'n', count, 'i', '1', 'mb', mb, 'tg', 0)
redis.call('DEL', KEYS[2], KEYS[3], KEYS[5], KEYS[6], KEYS[7])
hcall_from('HSET', KEYS[1], 10, 9 + 2 * n)
local win = open_window(3, false, 10 + 2 * n, #ARGV, 2)
win.legacy = false
local digests, elements = {}, {}
for i = 10 + 2 * n, #ARGV, 2 do
  digests[#digests + 1] = ARGV[i]
  elements[#elements + 1] = ARGV[i + 1]
end
push_all(KEYS[2], elements)
add(win, digests, tonumber(ARGV[4]))
save_window(win)
local ttl = tonumber(ARGV[1])
if ttl > 0 then extend(8, ttl, tonumber(ARGV[2]), now) end
local fresh_index = 1 - redis.call('EXISTS', KEYS[4])
redis.call('ZADD', KEYS[4], now, ARGV[5])
if ttl > 0 then  -- entries older than any live session's deadline belong to expired ones
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (now - ttl - math.floor(ttl / 16)))
end
emit(ARGV[7], ARGV[8])
return {OK, us, fresh_index}
