-- langgraph_copy: write a thread's checkpoints, as another thread's data hash and order held
-- them, into this thread (RedisSaver.copy_thread, after the store's branch made its session):
-- records, references, channel values and pending writes are set, reference counts added.
-- KEYS: root data order *members
-- ARGV: head session_key #fields *entries
-- OK: -
-- KEYS[1..7] the thread session's tree root keys (see the prelude)
-- KEYS[8] the thread's data hash   KEYS[9] the thread's order zset   KEYS[10 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] session key (index member)
-- ARGV[6] h = number of data hash arguments (field/value pairs: reference counts, fields
--   'n...', are added, the others set), ARGV[7 .. 6+h], then the order zset's members
-- Reply: {OK} | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i, type} | {TREE_CHANGED, ...}
--        | {DAMAGED, ...}
-- Events: none (the branch that made the session logged its own). Bounded by the source
-- thread's size, which the caller read in one snapshot. Every check is made before the first
-- write.
local stop, f, us, now, ttl, extend_now = thread_write()
if stop then return stop end

local h = tonumber(ARGV[6])
for i = 7, 6 + h, 2 do
  if string.sub(ARGV[i], 1, 1) == 'n' then
    redis.call('HINCRBY', KEYS[8], ARGV[i], tonumber(ARGV[i + 1]))
  else
    redis.call('HSET', KEYS[8], ARGV[i], ARGV[i + 1])
  end
end
local members = {}
for i = 7 + h, #ARGV do
  members[#members + 1] = 0
  members[#members + 1] = ARGV[i]
  if #members == 1000 then
    redis.call('ZADD', KEYS[9], unpack(members))
    members = {}
  end
end
if #members > 0 then redis.call('ZADD', KEYS[9], unpack(members)) end
redis.call('HSET', KEYS[1], 'updated_at', us)
redis.call('ZADD', KEYS[4], now, ARGV[5])
if extend_now then
  extend(8, ttl, tonumber(ARGV[2]), now)
else
  join_tree(f[2], {8, 9})
end
return {OK}
