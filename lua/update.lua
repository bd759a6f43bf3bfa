-- update: set the given scalar fields and replace all metadata; history untouched.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] session key
-- ARGV[4] n = number of scalar field/value pairs that follow, ARGV[5 .. 4+2n]
-- ARGV[5+2n ..] metadata pairs: 'm:' .. name, value (the new metadata, whole)
-- Reply: {OK, updated_at_us} | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i}
-- Events: none.
local bad = wrong_type({'hash', 'list', 'hash', 'zset'})
if bad then return {WRONG_TYPE, bad} end
local st = session_state(KEYS[1], KEYS[3])
if st ~= OK then return {st} end

local old = {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 2) == 'm:' then old[#old + 1] = f end
end
for i = 1, #old, 1000 do redis.call('HDEL', KEYS[1], unpack(old, i, math.min(i + 999, #old))) end
hcall_from('HSET', KEYS[1], 5, #ARGV)
return {OK, bump(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[1], ARGV[2])}
