-- delete: remove a session, its messages, its expiry marker, its index entry and every child.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- KEYS[5] kids zset   KEYS[6 ..] child meta, child msgs, child ids for each child, in the
--         order the caller read them from KEYS[5]
-- ARGV[1] session key (index member)   ARGV[2] events channel ('' = none)
-- ARGV[3] 'delete' event JSON   ARGV[4 ..] the child keys, as read from KEYS[5]
-- Reply: {OK, 1 if a live session was removed else 0}
--        | {CONFLICT} (children changed since they were read: nothing removed; read again)
-- Events: 'delete', only when a live session was removed. Idempotent otherwise.
if redis.call('ZCARD', KEYS[5]) ~= #ARGV - 3 then return {CONFLICT} end
for i = 4, #ARGV do
  if not redis.call('ZSCORE', KEYS[5], ARGV[i]) then return {CONFLICT} end
end
local existed = redis.call('EXISTS', KEYS[1])
for i = 1, #KEYS do
  if i ~= 4 then redis.call('DEL', KEYS[i]) end
end
redis.call('ZREM', KEYS[4], ARGV[1])
if existed == 1 then emit(ARGV[2], ARGV[3]) end
return {OK, existed}
