-- get_child: read a child session (merged ones included) in one snapshot. Read-only.
-- KEYS[1] child meta hash   KEYS[2] child msgs list
-- Reply: {OK, meta as flat field/value array, stored elements (digest .. JSON)}
--        | {NOT_FOUND} (never forked, discarded, expired or deleted) | {WRONG_TYPE, i}
local bad = wrong_type({'hash', 'list'})
if bad then return {WRONG_TYPE, bad} end
local f = redis.call('HMGET', KEYS[1], 'parent', 'discarded')
if not f[1] or f[2] then return {NOT_FOUND} end
return {OK, redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
