-- create: store a new session with its history, atomically; two creators -> one wins.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] session key (index member)
-- ARGV[4] call token (a retry of this very call finds it and answers OK again)
-- ARGV[5] events channel ('' = none)   ARGV[6] 'create' event JSON
-- ARGV[7] n = number of meta field/value pairs that follow, ARGV[8 .. 7+2n]
-- ARGV[8+2n ..] message pairs: 8-byte id digest, message JSON (distinct digests)
-- Reply: {OK, created_at_us, 1 if the index key was created by this call else 0} | {EXISTS}
--        | {WRONG_TYPE, i}
-- Events: 'create' on ARGV[5], only when the session was created by this call.
-- Index entries of sessions that expired (older than ttl) are pruned from KEYS[4] here.
-- Leftovers of an expired session (its ids hash) are removed first: the new session is fresh.
local bad = wrong_type({'hash', 'list', 'hash', 'zset'})
if bad then return {WRONG_TYPE, bad} end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'token') == ARGV[4] then
    return {OK, redis.call('HGET', KEYS[1], 'created_at'), 0}
  end
  return {EXISTS}
end

local us, ms = clock()
redis.call('DEL', KEYS[2], KEYS[3])
local n = tonumber(ARGV[7])
redis.call('HSET', KEYS[1], 'created_at', us, 'updated_at', us, 'token', ARGV[4])
hcall_from('HSET', KEYS[1], 8, 7 + 2 * n)
redis.call('HSET', KEYS[3], 'c', us)
for i = 8 + 2 * n, #ARGV, 2 do
  redis.call('RPUSH', KEYS[2], ARGV[i + 1])
  add_digest(KEYS[3], ARGV[i])
end
touch({KEYS[1], KEYS[2]}, KEYS[3], ARGV[1], ARGV[2])
local fresh_index = 1 - redis.call('EXISTS', KEYS[4])
redis.call('ZADD', KEYS[4], ms, ARGV[3])
local ttl = tonumber(ARGV[1])
if ttl > 0 then  -- every write re-scores and refreshes the TTL: older entries are expired
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (tonumber(ms) - ttl))
end
emit(ARGV[5], ARGV[6])
return {OK, us, fresh_index}
