-- langgraph_remove: remove some checkpoints of one thread (RedisSaver.prune, delete_for_runs):
-- each one's record, its pending writes, its place in the order and in its run's, and the
-- channel values no other checkpoint holds any more.
-- KEYS: data order
-- ARGV: *checkpoints
-- OK: removed
-- KEYS[1] the thread's data hash   KEYS[2] the thread's order zset
-- ARGV[1 ..] the checkpoints: '<ns>\0<checkpoint id>' each (the caller sends at most 100)
-- Reply: {OK, removed} (how many of them were there) | {WRONG_TYPE, i, type}
-- Events: none. Bounded by the checkpoints given, their channels and writes. A checkpoint
-- that is not there is skipped. The thread's TTL is left as it is.
local bad = wrong_type({'hash', 'zset'})
if bad then return bad end

local removed = 0
for _, cp in ipairs(ARGV) do
  local r = redis.call('HGET', KEYS[1], 'r\0' .. cp)
  if r then
    local refs = items(r)
    if refs[1] ~= '' then redis.call('ZREM', KEYS[2], 'u\0' .. refs[1] .. '\0' .. cp) end
    if refs[2] ~= '' and redis.call('HGET', KEYS[1], 's\0' .. refs[2]) == cp then
      redis.call('HDEL', KEYS[1], 's\0' .. refs[2])
    end
    for i = 3, #refs do
      local n = 'n' .. string.sub(refs[i], 2)
      if redis.call('HINCRBY', KEYS[1], n, -1) <= 0 then redis.call('HDEL', KEYS[1], n, refs[i]) end
    end
    local fields = redis.call('ZRANGEBYLEX', KEYS[2], '[w\0' .. cp .. '\0', '(w\0' .. cp .. '\1')
    for i = 1, #fields, 1000 do
      local chunk = {unpack(fields, i, math.min(i + 999, #fields))}
      redis.call('HDEL', KEYS[1], unpack(chunk))
      redis.call('ZREM', KEYS[2], unpack(chunk))
    end
    redis.call('HDEL', KEYS[1], 'c\0' .. cp, 'r\0' .. cp, 's\0' .. cp)
    redis.call('ZREM', KEYS[2], 'c\0' .. cp)
    removed = removed + 1
  end
end
return {OK, removed}
