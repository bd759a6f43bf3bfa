-- finish_rekey: end a rotation: the next passphrase becomes the passphrase and the master key's
-- wrap under the old one is dropped, so the old passphrase opens nothing any more.
-- KEYS: salts checksums keyring
-- ARGV: record next_record next_salt
-- OK: -
-- KEYS[1] salts hash   KEYS[2] checksums hash   KEYS[3] keyring hash
-- ARGV[1] record name ('passphrase')   ARGV[2] next record name ('passphrase.next')
-- ARGV[3] the next salt the caller rotated to
-- Reply: {OK} | {CONFLICT} (no such rotation is under way)
-- Events: none. Keyring fields end in ':<record name>' ('mk:passphrase').
if redis.call('HGET', KEYS[1], ARGV[2]) ~= ARGV[3] then return {CONFLICT} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], redis.call('HGET', KEYS[2], ARGV[2]))
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
local old, new = ':' .. ARGV[1], ':' .. ARGV[2]
local fields = redis.call('HKEYS', KEYS[3])
for _, f in ipairs(fields) do
  if string.sub(f, -#old) == old then redis.call('HDEL', KEYS[3], f) end
end
for _, f in ipairs(fields) do
  if string.sub(f, -#new) == new then
    redis.call('HSET', KEYS[3], string.sub(f, 1, -#new - 1) .. old, redis.call('HGET', KEYS[3], f))
    redis.call('HDEL', KEYS[3], f)
  end
end
return {OK}
