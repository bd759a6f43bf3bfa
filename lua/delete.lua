-- delete: remove a session, its messages, its expiry marker and its index entry. Idempotent.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] session key (index member)
-- Reply: {OK, 1 if a live session was removed else 0}
local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
return {OK, existed}
