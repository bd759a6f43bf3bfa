-- update_metadata: set some metadata entries and delete others, leaving the rest alone.
-- KEYS: root *members
-- ARGV: head session_key kid max_metadata_bytes #delete *set
-- OK: updated_at
-- KEYS[1..7] the tree's root keys (see the prelude); KEYS[8 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] session key   ARGV[6] key id set values are sealed with ('' = cleartext)
-- ARGV[7] max metadata bytes (0 = no limit)
-- ARGV[8] n = number of fields to delete ('m:' / 'e:' .. name), ARGV[9 .. 8+n]
-- ARGV[9+n ..] pairs to set: 'm:' .. name, value or 'e:' .. name, sealed value
-- Reply: {OK, updated_at_us} | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k, dk} | {WRONG_TYPE, i, type}
--        | {TREE_CHANGED, ...} | {DAMAGED, ...} | {TOO_LARGE, bytes, limit}
--        | {VERSION, field, version}
-- Events: none. The metadata's size as stored (names and values) is checked before anything
-- is written.
local bad = wrong_type({'hash', 'list', 'hash', 'zset'})
if bad then return bad end
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'tg', 'mb')
local refused = root_refused(f)
if refused then return refused end
if (f[2] or '') ~= ARGV[6] then return key_changed(f[2]) end
local us, now = clock()
local ttl = tonumber(ARGV[1])
local extend_now = due(f[3], ttl, now)
if extend_now and (f[4] or '0') ~= ARGV[3] then return tree_changed(f[4]) end
local n = tonumber(ARGV[8])
local mb = metadata_after(KEYS[1], f[5], 9 + n, #ARGV, 9, 8 + n)
local limit = tonumber(ARGV[7])
if limit > 0 and mb > limit then return {TOO_LARGE, mb, limit} end
local older = version_refused(KEYS[1], 9 + n, #ARGV)
if older then return older end

redis.call('HSET', KEYS[1], 'updated_at', us, 'mb', mb)
hcall_from('HDEL', KEYS[1], 9, 8 + n)
hcall_from('HSET', KEYS[1], 9 + n, #ARGV)
redis.call('ZADD', KEYS[4], now, ARGV[5])
if extend_now then extend(8, ttl, tonumber(ARGV[2]), now) end
return {OK, us}
