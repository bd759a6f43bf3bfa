-- begin_rekey: start a rotation to a new passphrase.
-- KEYS: salts checksums keyring
-- ARGV: record salt key_check master_field master_wrap
-- OK: -
-- KEYS[1] salts hash   KEYS[2] checksums hash   KEYS[3] keyring hash
-- ARGV[1] next record name ('passphrase.next')   ARGV[2] its salt   ARGV[3] its key check
-- ARGV[4] the keyring field of the master key's wrap under the new passphrase's key
-- ('mk:passphrase.next')   ARGV[5] that wrap
-- Reply: {OK} | {CONFLICT} (a rotation is under way)
-- Events: none. Readers holding either passphrase can open the master key meanwhile.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return {CONFLICT} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
return {OK}
