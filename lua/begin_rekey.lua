-- begin_rekey: start a rotation to a new passphrase and a new data key.
-- KEYS[1] salts hash   KEYS[2] checksums hash   KEYS[3] keyring hash
-- ARGV[1] the current key id the caller read ('' when none)   ARGV[2] the key id to be current
-- ARGV[3] next record name ('passphrase.next')   ARGV[4] its salt   ARGV[5] its key check
-- ARGV[6 ..] keyring field/value pairs to add: the master key and every data key of the
--            previous layout wrapped under the new passphrase's key
-- Reply: {OK} | {CONFLICT} (a rotation is under way, or the keyring changed since it was read)
-- Events: none. Readers holding either passphrase can open every key meanwhile.
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then return {CONFLICT} end
if (redis.call('HGET', KEYS[3], 'current') or '') ~= ARGV[1] then return {CONFLICT} end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[5])
hcall_from('HSET', KEYS[3], 6, #ARGV)
if ARGV[2] ~= '' then redis.call('HSET', KEYS[3], 'current', ARGV[2]) end
return {OK}
