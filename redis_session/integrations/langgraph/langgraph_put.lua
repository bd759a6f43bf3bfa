-- langgraph_put: one LangGraph checkpoint (RedisSaver.put): its record, the channel values of
-- the versions it makes (each version stored once, shared by every checkpoint that holds it),
-- a reference from it to every value it holds, and its place in the thread's order.
-- KEYS: root data order *members
-- ARGV: head session_key checkpoint record refs guard #blobs
-- OK: -
-- KEYS[1..7] the thread session's tree root keys (see the prelude)
-- KEYS[8] the thread's data hash   KEYS[9] the thread's order zset   KEYS[10 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] session key (index member)
-- ARGV[6] the checkpoint: '<ns>\0<checkpoint id>' (its fields are 'c\0' .. it, 'r\0' .. it)
-- ARGV[7] the checkpoint's record (opaque)
-- ARGV[8] its references, length-prefixed items ('<len>:<item>'): run id, parent checkpoint
--   ('<ns>\0<parent id>', '' = none), then the data field of each channel value it holds
-- ARGV[9] '' = no guard, else the parent ('<ns>\0<parent id>'): refused (STALE) when the
--   parent already has a guarded child other than this checkpoint
-- ARGV[10] b = number of new channel values, then b pairs: data field ('b\0<ns>\0<channel>\0<version>'),
--   value (opaque)
-- Reply: {OK} | {STALE, child} | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i, type}
--        | {TREE_CHANGED, ...} | {DAMAGED, ...}
-- The order zset's 'g\0' .. run id member names each run the thread has held (kept until
-- delete_for_runs removes the run: delete_thread unlists the thread from their registries).
-- Events: none. Bounded by the checkpoint's channels (no walk of the thread's history). A
-- record put again under its id (LangGraph does not, a retry may) drops its old references
-- first. Every check is made before the first write.
local stop, f, us, now, ttl, extend_now = thread_write()
if stop then return stop end
local cp = ARGV[6]
if ARGV[9] ~= '' then
  local child = redis.call('HGET', KEYS[8], 's\0' .. ARGV[9])
  if child and child ~= cp then return {STALE, child} end
end

local old = redis.call('HGET', KEYS[8], 'r\0' .. cp)
if old then
  local refs = items(old)
  if refs[1] ~= '' then redis.call('ZREM', KEYS[9], 'u\0' .. refs[1] .. '\0' .. cp) end
  for i = 3, #refs do
    local n = 'n' .. string.sub(refs[i], 2)
    if redis.call('HINCRBY', KEYS[8], n, -1) <= 0 then redis.call('HDEL', KEYS[8], n, refs[i]) end
  end
end
local b = tonumber(ARGV[10])
hcall_from('HSET', KEYS[8], 11, 10 + 2 * b)
local refs = items(ARGV[8])
for i = 3, #refs do redis.call('HINCRBY', KEYS[8], 'n' .. string.sub(refs[i], 2), 1) end
redis.call('HSET', KEYS[8], 'c\0' .. cp, ARGV[7], 'r\0' .. cp, ARGV[8])
if ARGV[9] ~= '' then redis.call('HSET', KEYS[8], 's\0' .. ARGV[9], cp) end
redis.call('ZADD', KEYS[9], 0, 'c\0' .. cp)
if refs[1] ~= '' then
  redis.call('ZADD', KEYS[9], 0, 'u\0' .. refs[1] .. '\0' .. cp, 0, 'g\0' .. refs[1])
end
redis.call('HSET', KEYS[1], 'updated_at', us)
redis.call('ZADD', KEYS[4], now, ARGV[5])
if extend_now then
  extend(8, ttl, tonumber(ARGV[2]), now)
else
  join_tree(f[2], {8, 9})
end
return {OK}
