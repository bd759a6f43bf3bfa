-- migrate_secrets: replace every secret with its re-encrypted bytes and set salt and
-- checksum 'default', all or nothing, only if nothing changed since the secrets were read.
-- KEYS[1] secrets hash   KEYS[2] salts hash   KEYS[3] checksums hash
-- ARGV[1] secrets version read (as returned by HGET v; '' when there was none)
-- ARGV[2] new salt   ARGV[3] new checksum
-- ARGV[4 ..] pairs: 's:' .. name, new bytes (every secret that was read)
-- Reply: {OK, number of secrets} | {CONFLICT} (a secret write or another migration came
--        first: nothing changed) | {WRONG_TYPE, i}
local bad = wrong_type({'hash', 'hash', 'hash'})
if bad then return {WRONG_TYPE, bad} end
if (redis.call('HGET', KEYS[1], 'v') or '') ~= ARGV[1] then return {CONFLICT} end

hcall_from('HSET', KEYS[1], 4, #ARGV)
redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSET', KEYS[2], 'default', ARGV[2])
redis.call('HSET', KEYS[3], 'default', ARGV[3])
return {OK, (#ARGV - 3) / 2}
