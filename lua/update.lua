-- update: set the given scalar fields and replace all metadata; history untouched.
-- KEYS: root *members
-- ARGV: head session_key kid #scalars *metadata
-- OK: updated_at
-- KEYS[1..7] the tree's root keys (see the prelude); KEYS[8 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] session key   ARGV[6] key id metadata values are sealed with ('' = cleartext)
-- ARGV[7] n = number of scalar field/value pairs that follow, ARGV[8 .. 7+2n]
-- ARGV[8+2n ..] metadata pairs: 'm:' .. name, value or 'e:' .. name, sealed value (the new
-- metadata, whole; the caller held it to its size limit)
-- Reply: {OK, updated_at_us} | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k, dk} | {WRONG_TYPE, i, type}
--        | {TREE_CHANGED, ...} | {DAMAGED, ...} | {VERSION, field, version}
-- Events: none.
local bad = wrong_type({'hash', 'list', 'hash', 'zset'})
if bad then return bad end
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'tg')
local refused = root_refused(f)
if refused then return refused end
if (f[2] or '') ~= ARGV[6] then return key_changed(f[2]) end
local us, now = clock()
local ttl = tonumber(ARGV[1])
local extend_now = due(f[3], ttl, now)
if extend_now and (f[4] or '0') ~= ARGV[3] then return tree_changed(f[4]) end

local first = 8 + 2 * tonumber(ARGV[7])
local older = version_refused(KEYS[1], first, #ARGV)
if older then return older end
local mb = 0
for i = first, #ARGV, 2 do mb = mb + #ARGV[i] + #ARGV[i + 1] end
redis.call('HSET', KEYS[1], 'updated_at', us, 'mb', mb)
local old = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local p = string.sub(field, 1, 2)
  if p == 'm:' or p == 'e:' then old[#old + 1] = field end
end
for i = 1, #old, 1000 do redis.call('HDEL', KEYS[1], unpack(old, i, math.min(i + 999, #old))) end
hcall_from('HSET', KEYS[1], 8, #ARGV)
redis.call('ZADD', KEYS[4], now, ARGV[5])
if extend_now then extend(8, ttl, tonumber(ARGV[2]), now) end
return {OK, us}
