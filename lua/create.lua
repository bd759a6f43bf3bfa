-- create: store a new session with its history, atomically; two creators -> one wins.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] session key (index member)
-- ARGV[4] n = number of meta field/value pairs that follow, ARGV[5 .. 4+2n]
-- ARGV[5+2n ..] message pairs: 8-byte id digest, message JSON (distinct digests)
-- Reply: {OK, created_at_us} | {EXISTS} | {WRONG_TYPE, i}
-- Leftovers of an expired session (its ids hash) are removed first: the new session is fresh.
local bad = wrong_type({'hash', 'list', 'hash', 'zset'})
if bad then return {WRONG_TYPE, bad} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {EXISTS} end

local us, ms = clock()
redis.call('DEL', KEYS[2], KEYS[3])
local n = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'created_at', us, 'updated_at', us)
hcall_from('HSET', KEYS[1], 5, 4 + 2 * n)
redis.call('HSET', KEYS[3], 'c', us)
for i = 5 + 2 * n, #ARGV, 2 do
  redis.call('RPUSH', KEYS[2], ARGV[i + 1])
  add_digest(KEYS[3], ARGV[i])
end
touch({KEYS[1], KEYS[2]}, KEYS[3], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[4], ms, ARGV[3])
return {OK, us}
