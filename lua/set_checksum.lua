-- set_checksum: store checksum NAME, only when salt NAME exists.
-- KEYS: salts checksums
-- ARGV: name checksum
-- OK: -
-- KEYS[1] salts hash   KEYS[2] checksums hash
-- ARGV[1] name   ARGV[2] checksum bytes
-- Reply: {OK} | {MISSING} (no salt of that name) | {WRONG_TYPE, i, type}
local bad = wrong_type({'hash', 'hash'})
if bad then return bad end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {MISSING} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {OK}
