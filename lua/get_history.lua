-- get_history: the messages only, or the newest N, without reading the rest. Read-only.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash
-- ARGV[1] N (0 = all)
-- Reply: {OK, messages (JSON, append order)} | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i}
-- The hot path is one LRANGE: a session with messages has its list; only an empty answer
-- needs the meta hash and the expiry marker to tell empty from missing or expired.
local n = tonumber(ARGV[1])
local first = 0
if n > 0 then first = -n end
local msgs = redis.pcall('LRANGE', KEYS[2], first, -1)
if failed(msgs) then return {WRONG_TYPE, 2} end
if #msgs > 0 then return {OK, msgs} end
local bad = wrong_type({'hash', 'list', 'hash'})
if bad then return {WRONG_TYPE, bad} end
local st = session_state(KEYS[1], KEYS[3])
if st ~= OK then return {st} end
return {OK, msgs}
