-- set_master_key: give a prefix of the previous layout (data keys in its keyring, no master
-- key) a master key, once.
-- KEYS[1] keyring hash
-- ARGV[1] field ('mk:' .. record)   ARGV[2] the master key's wrap
-- Reply: {OK, the wrap the keyring holds now} (another store's, when it came first)
--        | {WRONG_TYPE, 1, type}
-- Events: none.
local bad = wrong_type({'hash'})
if bad then return bad end
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return {OK, redis.call('HGET', KEYS[1], ARGV[1])}
