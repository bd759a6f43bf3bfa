-- get_history: the messages only, or the newest N, without reading the rest. Read-only.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash
-- ARGV[1] N (0 = all)
-- Reply: {OK, messages (JSON, append order)} | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i}
local bad = wrong_type({'hash', 'list', 'hash'})
if bad then return {WRONG_TYPE, bad} end
local st = session_state(KEYS[1], KEYS[3])
if st ~= OK then return {st} end
local n = tonumber(ARGV[1])
if n > 0 then return {OK, redis.call('LRANGE', KEYS[2], -n, -1)} end
return {OK, redis.call('LRANGE', KEYS[2], 0, -1)}
