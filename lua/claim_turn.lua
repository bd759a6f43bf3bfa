-- claim_turn: claim a session's turn for a lease, if nobody holds it: the turn's token grows
-- with every claim of the session (meta field 'tk'), so a write fenced with an older one is
-- refused once a later claim exists.
-- KEYS: root turn
-- ARGV: lease_ms call_token
-- OK: token
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the session's turn key
-- ARGV[1] the lease (ms)   ARGV[2] this claim's call token (a retry of it finds its own claim)
-- Reply: {OK, token} (the turn's value is then '<token>:<call token>')
--        | {TURN_BUSY, pttl} (another claim holds it for pttl ms more) | {NOT_FOUND} | {EXPIRED}
--        | {WRONG_TYPE, i, type} | {DAMAGED, ...}
-- Events: none. The session's content, TTL and updated_at are left alone; the turn key expires
-- with its lease. The first write (HINCRBY) is refused when Redis is out of memory or a
-- replica: nothing is claimed then.
local f = redis.pcall('HMGET', KEYS[1], 'v', 'tk')
local refused = root_refused(f)
if refused then return refused end
local held = redis.pcall('GET', KEYS[8])
if failed(held) then return refusal(held, 8) end
if held then
  local token, call = string.match(held, '^(%d+):(.*)$')
  if call == ARGV[2] then return {OK, token} end
  return {TURN_BUSY, redis.call('PTTL', KEYS[8])}
end
local token = redis.call('HINCRBY', KEYS[1], 'tk', 1)
redis.call('SET', KEYS[8], token .. ':' .. ARGV[2], 'PX', ARGV[1])
return {OK, tostring(token)}
