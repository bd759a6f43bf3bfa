-- stage_push: one step of a large write staged before it lands at once (a create with a long
-- history): append elements to a staging list.
-- KEYS: stage
-- ARGV: length ttl_ms *elements
-- OK: length
-- KEYS[1] the staging list
-- ARGV[1] its length so far (a retried step finds it longer and copies nothing twice)
-- ARGV[2] its TTL ms (until the write lands)   ARGV[3 ..] the elements
-- Reply: {OK, length} | {STALE} (the list is not as long as the caller says) | {WRONG_TYPE, 1, type}
-- Events: none.
local bad = wrong_type({'list'})
if bad then return bad end
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[1]) then return {STALE} end
hcall_from('RPUSH', KEYS[1], 3, #ARGV)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return {OK, redis.call('LLEN', KEYS[1])}
