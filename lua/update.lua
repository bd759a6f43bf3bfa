-- update: set the given scalar fields and replace all metadata; history untouched.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] session key
-- ARGV[4] key id metadata values are sealed with ('' = cleartext)
-- ARGV[5] n = number of scalar field/value pairs that follow, ARGV[6 .. 5+2n]
-- ARGV[6+2n ..] metadata pairs: 'm:' .. name, value or 'e:' .. name, sealed value (the new
-- metadata, whole)
-- Reply: {OK, updated_at_us} | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k} | {WRONG_TYPE, i}
-- Events: none.
local refused = write_refused(ARGV[4])
if refused then return refused end

local old = {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  local p = string.sub(f, 1, 2)
  if p == 'm:' or p == 'e:' then old[#old + 1] = f end
end
for i = 1, #old, 1000 do redis.call('HDEL', KEYS[1], unpack(old, i, math.min(i + 999, #old))) end
hcall_from('HSET', KEYS[1], 6, #ARGV)
return {OK, bump(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[1], ARGV[2])}
