-- copy_range: one step of copying a list's messages to another list, in order, each with a
-- prefix (a child's inherited messages, copied from its parent before the child exists).
-- KEYS: source_meta source_msgs target
-- ARGV: generation from_ to copied prefix ttl_ms budget
-- OK: upto length
-- KEYS[1] the source's meta hash   KEYS[2] the source list   KEYS[3] the target list
-- ARGV[1] the source list's generation the copy began in   ARGV[2] from and ARGV[3] to
-- (absolute positions in the source)   ARGV[4] the target's length so far
-- ARGV[5] the prefix of every copied element   ARGV[6] the target's TTL ms (until the copy
-- is done)   ARGV[7] bytes to copy at most
-- Reply: {OK, upto, target length} | {STALE} (the source began a new generation, or a part
--        of the range was trimmed away, or the target is not as long as the caller says: a
--        retried step copies nothing twice) | {WRONG_TYPE, i, type} | {DAMAGED, ...}
-- Events: none.
local bad = wrong_type({'hash', 'list', 'list'})
if bad then return bad end
local f = redis.call('HMGET', KEYS[1], 'g', 'h', 'n')
local g, h, n = positions(f[1], f[2], f[3], 2)
if not g then return h end
local from, to = tonumber(ARGV[2]), tonumber(ARGV[3])
if tostring(g) ~= ARGV[1] or from < h or to > n then return {STALE} end
if redis.call('LLEN', KEYS[3]) ~= tonumber(ARGV[4]) then return {STALE} end
local items, upto = read_from(2, h, from, to, tonumber(ARGV[7]))
local prefix = ARGV[5]
for i, m in ipairs(items) do items[i] = prefix .. m end
push_all(KEYS[3], items)
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[6]))
return {OK, upto, redis.call('LLEN', KEYS[3])}
