-- get: read a whole session in one consistent snapshot. Read-only.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash
-- Reply: {OK, meta as flat field/value array, messages (JSON, append order)}
--        | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i}
local bad = wrong_type({'hash', 'list', 'hash'})
if bad then return {WRONG_TYPE, bad} end
local st = session_state(KEYS[1], KEYS[3])
if st ~= OK then return {st} end
return {OK, redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
