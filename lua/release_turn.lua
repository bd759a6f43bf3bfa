-- release_turn: give a session's turn back, if it is still the caller's, and wake one waiter.
-- KEYS: turn wake
-- ARGV: fence wake_ms
-- OK: released
-- KEYS[1] the session's turn key   KEYS[2] its wake list (waiters block on it: BLPOP)
-- ARGV[1] the turn's value ('<token>:<call token>')   ARGV[2] how long a wake waits for a
-- waiter (ms)
-- Reply: {OK, 1} (released) | {OK, 0} (not the caller's any more: nothing changed)
--        | {WRONG_TYPE, i, type}
-- Events: none. One element is pushed for one waiter; a waiter woken for nothing claims, finds
-- the turn busy and waits again; the wake list expires by itself.
local bad = wrong_type({'string', 'list'})
if bad then return bad end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {OK, 0} end
redis.call('DEL', KEYS[1])
redis.call('RPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], -1, -1)  -- one wake at a time: the woken claimer releases next
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {OK, 1}
