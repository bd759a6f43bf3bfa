-- migrate_secrets: replace every secret with its re-encrypted bytes and set salt and
-- checksum 'default', all or nothing, only if nothing changed since the secrets were read.
-- KEYS: secrets salts checksums stage
-- ARGV: version salt checksum staged *pairs
-- OK: migrated
-- KEYS[1] secrets hash   KEYS[2] salts hash   KEYS[3] checksums hash
-- KEYS[4] a staging hash (many secrets: the new ones were put there by HSET in steps)
-- ARGV[1] secrets version read (as returned by HGET v; '' when there was none)
-- ARGV[2] new salt   ARGV[3] new checksum
-- ARGV[4] s = the number of secrets staged in KEYS[4], or 0 and then
-- ARGV[5 ..] pairs: 's:' .. name, new bytes (every secret that was read)
-- Reply: {OK, number of secrets} | {CONFLICT} (a secret write or another migration came
--        first: nothing changed) | {STALE} (the staging hash is not what was staged)
--        | {WRONG_TYPE, i, type}
-- Events: none. A staged migration swaps the staging hash in (RENAME): one step, however
-- many secrets, so the script stays short.
local bad = wrong_type({'hash', 'hash', 'hash', 'hash'})
if bad then return bad end
local v = redis.call('HGET', KEYS[1], 'v')
if (v or '') ~= ARGV[1] then return {CONFLICT} end
local staged = tonumber(ARGV[4])
if staged > 0 and redis.call('HLEN', KEYS[4]) ~= staged then return {STALE} end

redis.call('HSET', KEYS[2], 'default', ARGV[2])
redis.call('HSET', KEYS[3], 'default', ARGV[3])
if staged > 0 then
  redis.call('HSET', KEYS[4], 'v', tonumber(v or '0') + 1)
  redis.call('RENAME', KEYS[4], KEYS[1])
  redis.call('PERSIST', KEYS[1])
  return {OK, staged}
end
hcall_from('HSET', KEYS[1], 5, #ARGV)
redis.call('HINCRBY', KEYS[1], 'v', 1)
return {OK, (#ARGV - 4) / 2}
