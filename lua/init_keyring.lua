-- init_keyring: create the encryption records of a prefix, once: the passphrase's salt and key
-- check, and the master key wrapped under the passphrase's key.
-- KEYS: salts checksums keyring
-- ARGV: record salt key_check master_wrap
-- OK: -
-- KEYS[1] salts hash   KEYS[2] checksums hash   KEYS[3] keyring hash
-- ARGV[1] record name ('passphrase')   ARGV[2] salt   ARGV[3] key check
-- ARGV[4] the master key's wrap (keyring field 'mk:' .. record)
-- Reply: {OK} | {EXISTS} (a keyring exists: another store made it first) | {WRONG_TYPE, i, type}
-- Events: none. A store that finds the records gone but sealed sessions left restores them
-- from a session (its salt and its copy of the master key's wrap), so workers keep one key.
local bad = wrong_type({'hash', 'hash', 'hash'})
if bad then return bad end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then
  return {EXISTS}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[3], 'mk:' .. ARGV[1], ARGV[4])
return {OK}
