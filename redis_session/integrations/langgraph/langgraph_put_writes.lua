-- langgraph_put_writes: the pending writes of one task on one checkpoint
-- (RedisSaver.put_writes), LangGraph's rule: a regular write (index >= 0) already stored under
-- its task and index is kept (the first one wins), a special one (error, interrupt, resume,
-- scheduled: a negative index) replaces the stored one.
-- KEYS: root data order *members
-- ARGV: head session_key checkpoint #writes
-- OK: stored
-- KEYS[1..7] the thread session's tree root keys (see the prelude)
-- KEYS[8] the thread's data hash   KEYS[9] the thread's order zset   KEYS[10 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] session key (index member)   ARGV[6] the checkpoint: '<ns>\0<checkpoint id>'
-- ARGV[7] w = number of writes, then w triples: '<task id>\0<index>', '1' = replace
--   (special) or '0' = keep a stored one, the write (opaque)
-- Reply: {OK, stored} (how many writes were stored) | {NOT_FOUND} | {EXPIRED}
--        | {WRONG_TYPE, i, type} | {TREE_CHANGED, ...} | {DAMAGED, ...}
-- Events: none. Bounded by the writes given. Every check is made before the first write.
local stop, f, us, now, ttl, extend_now = thread_write()
if stop then return stop end

local stored = 0
local w = tonumber(ARGV[7])
for i = 8, 7 + 3 * w, 3 do
  local field = 'w\0' .. ARGV[6] .. '\0' .. ARGV[i]
  if ARGV[i + 1] == '1' or redis.call('HEXISTS', KEYS[8], field) == 0 then
    redis.call('HSET', KEYS[8], field, ARGV[i + 2])
    redis.call('ZADD', KEYS[9], 0, field)
    stored = stored + 1
  end
end
redis.call('HSET', KEYS[1], 'updated_at', us)
redis.call('ZADD', KEYS[4], now, ARGV[5])
if extend_now then
  extend(8, ttl, tonumber(ARGV[2]), now)
else
  join_tree(f[2], {8, 9})
end
return {OK, stored}
