-- append_child_message: append messages to a live, unmerged child only; trim to its max.
-- KEYS[1] child meta hash   KEYS[2] child msgs list   KEYS[3] child ids hash
-- KEYS[4] parent meta hash  KEYS[5] parent msgs list  KEYS[6] parent ids hash
-- KEYS[7] parent's kids zset   KEYS[8] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] parent key
-- ARGV[4] key id the elements are sealed with ('' = cleartext); it must be the parent's
-- ARGV[5 ..] message pairs: 8-byte id digest, stored element (digest .. JSON or sealed)
-- Reply: {OK, number appended} | {NOT_FOUND} | {MERGED} | {KEY_CHANGED, k} | {WRONG_TYPE, i}
-- Events: none. The parent's messages are untouched; its TTL and updated_at are refreshed,
-- so a sub-agent at work keeps its parent alive. Ids the child holds are skipped.
local bad = wrong_type({'hash', 'list', 'hash', 'hash', 'list', 'hash', 'zset', 'zset'})
if bad then return {WRONG_TYPE, bad} end
local st = child_state(KEYS[1], ARGV[3])
if st ~= OK then return {st} end
local k = other_key(KEYS[4], ARGV[4])
if k then return {KEY_CHANGED, k} end

local added = 0
for i = 5, #ARGV, 2 do
  if not has_digest(KEYS[3], ARGV[i]) then
    redis.call('RPUSH', KEYS[2], ARGV[i + 1])
    add_digest(KEYS[3], ARGV[i])
    added = added + 1
  end
end
if added > 0 then
  local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '0')
  if max > 0 then redis.call('LTRIM', KEYS[2], -max, -1) end
  touch({KEYS[1], KEYS[2], KEYS[7]}, KEYS[3], ARGV[1], ARGV[2])
  if redis.call('EXISTS', KEYS[4]) == 1 then
    bump(KEYS[4], KEYS[5], KEYS[6], KEYS[8], ARGV[3], ARGV[1], ARGV[2])
  end
end
return {OK, added}
