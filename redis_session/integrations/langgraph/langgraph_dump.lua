-- langgraph_dump: everything one thread holds in its data hash and order zset, in one
-- snapshot (RedisSaver.copy_thread reads its source thread with it).
-- KEYS: data order
-- ARGV: max_fields
-- OK: fields entries
-- KEYS[1] the thread's data hash   KEYS[2] the thread's order zset
-- ARGV[1] the most data hash fields the caller takes (more: TOO_LARGE, nothing read)
-- Reply: {OK, {field, value...}, {member...}} | {TOO_LARGE, fields, max_fields}
--        | {WRONG_TYPE, i, type}
-- Events: none. Bounded by max_fields (a copy takes the whole thread in one snapshot).
local bad = wrong_type({'hash', 'zset'})
if bad then return bad end
local n = redis.call('HLEN', KEYS[1])
if n > tonumber(ARGV[1]) then return {TOO_LARGE, n, tonumber(ARGV[1])} end
return {OK, redis.call('HGETALL', KEYS[1]), redis.call('ZRANGE', KEYS[2], 0, -1)}
