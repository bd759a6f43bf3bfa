-- set_secret: store (or with no value, delete) secret NAME and bump the secrets version.
-- KEYS: secrets
-- ARGV: field value
-- OK: changed
-- KEYS[1] secrets hash (fields 's:' .. name, and 'v' = version counter)
-- ARGV[1] 's:' .. name   ARGV[2] opaque bytes (absent: delete)
-- Reply: {OK, 1 if a field was added or removed else 0} | {WRONG_TYPE, 1, type}
-- The version lets migrate_secrets refuse to apply over a write it did not see.
local bad = wrong_type({'hash'})
if bad then return bad end
local changed
if ARGV[2] then
  changed = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
else
  changed = redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('HINCRBY', KEYS[1], 'v', 1)
return {OK, changed}
