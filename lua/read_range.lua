-- read_range: the next part of a list read in steps (a session's or a child's), as long as
-- the list has not changed but for appends and trims since the first step. Read-only.
-- KEYS: meta msgs
-- ARGV: generation from_ to budget token
-- OK: elements upto
-- KEYS[1] the meta hash (a session's or a child's)   KEYS[2] its list
-- ARGV[1] the generation the read began in   ARGV[2] from (absolute position)
-- ARGV[3] to (absolute, exclusive)   ARGV[4] bytes to read at most
-- ARGV[5] the token the read began with ('' for a session of the earliest layout, which has
--         none; absent: not checked): a list deleted and made again (a new token, generation
--         0 again) is another list
-- Reply: {OK, elements at positions from .. upto - 1, upto} | {STALE} (another generation or
--        token, or from was trimmed away: read again from the start) | {WRONG_TYPE, i, type}
--        | {DAMAGED, ...}
local bad = wrong_type({'hash', 'list'})
if bad then return bad end
local f = redis.call('HMGET', KEYS[1], 'g', 'h', 'n', 'token')
local g, h, n = positions(f[1], f[2], f[3], 2)
if not g then return h end
local from, to = tonumber(ARGV[2]), tonumber(ARGV[3])
if tostring(g) ~= ARGV[1] or from < h or to > n then return {STALE} end
if ARGV[5] and (f[4] or '') ~= ARGV[5] then return {STALE} end
local elements, upto = read_from(2, h, from, to, tonumber(ARGV[4]))
return {OK, elements, upto}
