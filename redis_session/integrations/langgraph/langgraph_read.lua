-- langgraph_read: checkpoints of one thread in one snapshot (RedisSaver.get_tuple, list): each
-- with its record, its references, the channel values it holds and its pending writes; with a
-- ttl, the read refreshes the thread's TTL (ttl_config's refresh_on_read).
-- KEYS: root data order *members
-- ARGV: head high low count exact
-- OK: checkpoints
-- KEYS[1..7] the thread session's tree root keys (see the prelude)
-- KEYS[8] the thread's data hash   KEYS[9] the thread's order zset   KEYS[10 ..] the tree's members
-- ARGV[1] ttl ms (0 = the read refreshes nothing)   ARGV[2] grace ms
-- ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] high, ARGV[6] low: ZREVRANGEBYLEX bounds (max, min) over the order zset's 'c\0' members
-- ARGV[7] count: at most this many checkpoints, newest first
-- ARGV[8] '' = by range, else one checkpoint: '<ns>\0<checkpoint id>' (the range is not read)
-- Reply: {OK, {{checkpoint, record, references, {value...}, {write...}}...}} (a value is nil when
--        its channel holds none) | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i, type}
--        | {TREE_CHANGED, ...} | {DAMAGED, ...}
-- Events: none. Bounded by count checkpoints, their channels and writes.
local f = redis.pcall('HMGET', KEYS[1], 'v', 'x', 'tg')
local refused = root_refused(f)
if refused then return refused end
local bad = wrong_type({'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'hash', 'zset'})
if bad then return bad end
local ttl = tonumber(ARGV[1])
local now = 0
if ttl > 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
  if due(f[2], ttl, now) and (f[3] or '0') ~= ARGV[3] then return tree_changed(f[3]) end
end

local wanted
if ARGV[8] ~= '' then
  wanted = {ARGV[8]}
else
  wanted = {}
  local members = redis.call('ZREVRANGEBYLEX', KEYS[9], ARGV[5], ARGV[6], 'LIMIT', 0, tonumber(ARGV[7]))
  for i, m in ipairs(members) do wanted[i] = string.sub(m, 3) end
end
local out = {}
for _, cp in ipairs(wanted) do
  local got = redis.call('HMGET', KEYS[8], 'c\0' .. cp, 'r\0' .. cp)
  if got[1] then
    local refs = items(got[2])
    local values = {}
    if #refs > 2 then values = redis.call('HMGET', KEYS[8], unpack(refs, 3)) end
    local fields = redis.call('ZRANGEBYLEX', KEYS[9], '[w\0' .. cp .. '\0', '(w\0' .. cp .. '\1')
    local writes = {}
    if #fields > 0 then writes = redis.call('HMGET', KEYS[8], unpack(fields)) end
    out[#out + 1] = {cp, got[1], got[2], values, writes}
  end
end
if ttl > 0 and #out > 0 and due(f[2], ttl, now) then extend(8, ttl, tonumber(ARGV[2]), now) end
return {OK, out}
