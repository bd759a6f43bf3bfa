-- renew_turn: extend a turn's lease, if it is still the caller's.
-- KEYS: turn
-- ARGV: fence lease_ms
-- OK: -
-- KEYS[1] the session's turn key
-- ARGV[1] the turn's value ('<token>:<call token>')   ARGV[2] the new lease (ms)
-- Reply: {OK} | {TURN_LOST} (the lease ran out, or a later claim took over)
--        | {WRONG_TYPE, 1, type}
-- Events: none.
local bad = wrong_type({'string'})
if bad then return bad end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {TURN_LOST} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {OK}
