-- update_metadata: set some metadata entries and delete others, leaving the rest alone.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] session key
-- ARGV[4] key id set values are sealed with ('' = cleartext)
-- ARGV[5] n = number of fields to delete ('m:' / 'e:' .. name), ARGV[6 .. 5+n]
-- ARGV[6+n ..] pairs to set: 'm:' .. name, value or 'e:' .. name, sealed value
-- Reply: {OK, updated_at_us} | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k} | {WRONG_TYPE, i}
-- Events: none.
local refused = write_refused(ARGV[4])
if refused then return refused end

local n = tonumber(ARGV[5])
hcall_from('HDEL', KEYS[1], 6, 5 + n)
hcall_from('HSET', KEYS[1], 6 + n, #ARGV)
return {OK, bump(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[1], ARGV[2])}
