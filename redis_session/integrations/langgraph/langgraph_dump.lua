-- langgraph_dump: everything one thread holds in its data hash and order zset, in one
-- snapshot (RedisSaver.copy_thread reads its source thread with it).
-- KEYS: data order
-- ARGV: -
-- OK: fields members
-- KEYS[1] the thread's data hash   KEYS[2] the thread's order zset
-- Reply: {OK, {field, value...}, {member...}} | {WRONG_TYPE, i, type}
-- Events: none. Bounded by the thread's size (a copy takes the whole thread).
local bad = wrong_type({'hash', 'zset'})
if bad then return bad end
return {OK, redis.call('HGETALL', KEYS[1]), redis.call('ZRANGE', KEYS[2], 0, -1)}
