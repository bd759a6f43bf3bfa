-- fork_child: create a child session of a live parent, inheriting its last N messages.
-- KEYS[1] child meta hash   KEYS[2] child msgs list   KEYS[3] child ids hash
-- KEYS[4] parent meta hash  KEYS[5] parent msgs list  KEYS[6] parent ids hash
-- KEYS[7] parent's kids zset   KEYS[8] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] parent key
-- ARGV[4] child key   ARGV[5] agent name   ARGV[6] config JSON   ARGV[7] max messages (0 = all)
-- ARGV[8] N messages to inherit   ARGV[9] call token   ARGV[10] events channel ('' = none)
-- ARGV[11] 'fork' event JSON   ARGV[12] the caller's key id for the parent ('' = cleartext)
-- Reply: {OK, created_at_us, the child's stored elements} | {PARENT_GONE, NOT_FOUND or EXPIRED}
--        | {EXISTS} | {KEY_CHANGED, k} | {WRONG_TYPE, i}
-- Events: 'fork', only when this call created the child (a retry answers OK silently).
-- Inherited messages are stored with an all-zero digest: they are never merged back.
local bad = wrong_type({'hash', 'list', 'hash', 'hash', 'list', 'hash', 'zset', 'zset'})
if bad then return {WRONG_TYPE, bad} end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'token') == ARGV[9] then
    return {OK, redis.call('HGET', KEYS[1], 'created_at'), redis.call('LRANGE', KEYS[2], 0, -1)}
  end
  return {EXISTS}
end
local st = session_state(KEYS[4], KEYS[6])
if st ~= OK then return {PARENT_GONE, st} end
local k = other_key(KEYS[4], ARGV[12])
if k then return {KEY_CHANGED, k} end

redis.call('DEL', KEYS[2], KEYS[3])
local n = tonumber(ARGV[8])
if n > 0 then
  for _, m in ipairs(redis.call('LRANGE', KEYS[5], -n, -1)) do
    redis.call('RPUSH', KEYS[2], INHERITED .. m)
  end
end
local us = bump(KEYS[4], KEYS[5], KEYS[6], KEYS[8], ARGV[3], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'v', '1', 'key', ARGV[4], 'parent', ARGV[3], 'agent', ARGV[5],
  'config', ARGV[6], 'max', ARGV[7], 'created_at', us, 'token', ARGV[9])
redis.call('HSET', KEYS[3], 'c', us)
touch({KEYS[1], KEYS[2], KEYS[7]}, KEYS[3], ARGV[1], ARGV[2])
local last = redis.call('ZREVRANGE', KEYS[7], 0, 0, 'WITHSCORES')
local seq = 1
if last[2] then seq = tonumber(last[2]) + 1 end
redis.call('ZADD', KEYS[7], seq, ARGV[4])
emit(ARGV[10], ARGV[11])
return {OK, us, redis.call('LRANGE', KEYS[2], 0, -1)}
