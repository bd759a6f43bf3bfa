-- pop_message: remove and return the newest message of a session (idempotent per call token).
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] session key
-- ARGV[4] call token   ARGV[5] expected prefix of the newest message ('{"id":"<id>",'), or ''
-- ARGV[6] the caller's key id for the session ('' = cleartext)
-- Reply: {OK, element} | {OK} (the history is empty) | {STALE} (the newest message is not the
--        expected one) | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k} | {WRONG_TYPE, i}
-- Events: none. The popped message's id digest is kept (re-appending that id stores nothing).
-- A call retried after a lost reply finds its token with the element it popped and answers the
-- same, popping nothing more. Refreshes the TTL, updated_at and the index.
local refused = write_refused(ARGV[6])
if refused then return refused end
local last = redis.call('HMGET', KEYS[1], 'pop_token', 'popped')
if last[1] == ARGV[4] then return {OK, last[2]} end
local top = redis.call('LINDEX', KEYS[2], -1)
if not top then return {OK} end
local expect = ARGV[5]
if expect ~= '' and string.sub(top, 1, #expect) ~= expect then return {STALE} end

redis.call('RPOP', KEYS[2])
redis.call('HSET', KEYS[1], 'pop_token', ARGV[4], 'popped', top)
bump(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[1], ARGV[2])
return {OK, top}
