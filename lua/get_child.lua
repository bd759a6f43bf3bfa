-- get_child: read a child session (merged ones included) in one snapshot; with the version of
-- what the caller holds already, only the messages added since. Read-only.
-- KEYS: child_meta child_msgs done parent_meta child_ids
-- ARGV: child_key generation tail budget held_head token
-- OK: meta from_ head tail generation elements upto kid dk context_tokens
-- KEYS[1] child meta hash   KEYS[2] child msgs list   KEYS[3] the parent's done zset
-- KEYS[4] the parent's meta hash (its key id and data key seal the child's messages)
-- KEYS[5] child ids hash (its token sums: see the prelude)
-- ARGV[1] child key   ARGV[2] generation and ARGV[3] tail position the caller holds messages
--         up to ('' = none)   ARGV[4] bytes to read at most (the rest: read_range)
-- ARGV[5] the position of the first message the caller holds   ARGV[6] the child's fork token
--         the caller read (only when ARGV[3] is not '')
-- Reply: {OK, meta as a flat field/value array, from, h, n, g, stored elements (digest ..
--        element) at positions from .. upto - 1, upto, the parent's k, dk, the tokens the
--        child holds (false: its token sums are unknown, as after its merge)}
--        | {NOT_FOUND} (never forked, discarded, expired or deleted) | {PRUNED, merged_at}
--        | {WRONG_TYPE, i, type} | {DAMAGED, ...}
local bad = wrong_type({'hash', 'list', 'zset', 'hash', 'hash'})
if bad then return bad end
local f = redis.call('HMGET', KEYS[1], 'parent', 'g', 'h', 'n', 'token')
if not f[1] then
  local at = redis.call('ZSCORE', KEYS[3], 'm' .. ARGV[1])
  if at then return {PRUNED, at} end
  if redis.call('EXISTS', KEYS[1]) == 1 then return {DAMAGED, 1, 'foreign'} end
  if redis.call('EXISTS', KEYS[2]) == 1 then return {DAMAGED, 1, 'missing'} end
  return {NOT_FOUND}
end
local g, h, n = positions(f[2], f[3], f[4], 2)
if not g then return h end
local from = h
if ARGV[3] ~= '' and ARGV[2] == tostring(g) and ARGV[6] == (f[5] or '') then
  local held = tonumber(ARGV[3])
  if held >= h and held <= n and tonumber(ARGV[5]) <= h then from = held end
end
local elements, upto = read_from(2, h, from, n, tonumber(ARGV[4]))
local p = redis.call('HMGET', KEYS[4], 'k', 'dk')
local fr = sums_frame(5, nil, nil, nil, g, h, n)
return {OK, redis.call('HGETALL', KEYS[1]), from, h, n, g, elements, upto, p[1] or '', p[2] or '',
  fr and fr[3] - fr[2]}
