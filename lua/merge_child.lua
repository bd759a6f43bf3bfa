-- merge_child: fold a child into its parent in one step: a summary message, or the child's
-- own messages in order; then mark the child merged.
-- KEYS[1] child meta hash   KEYS[2] child msgs list   KEYS[3] child ids hash
-- KEYS[4] parent meta hash  KEYS[5] parent msgs list  KEYS[6] parent ids hash
-- KEYS[7] parent's kids zset   KEYS[8] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms
-- ARGV[3] parent max messages (0 = all)   ARGV[4] parent key   ARGV[5] call token
-- ARGV[6] 'summary' or 'history'   ARGV[7] summary id digest   ARGV[8] summary JSON
-- ARGV[9] events channel ('' = none)   ARGV[10] 'merge' event JSON
-- ARGV[11] key id the summary is sealed with ('' = cleartext); it must be the parent's
-- Reply: {OK, merged_at_us, messages appended to the parent} | {NOT_FOUND} (child)
--        | {MERGED} | {PARENT_GONE, NOT_FOUND or EXPIRED} | {KEY_CHANGED, k} | {WRONG_TYPE, i}
-- Events: 'merge', only when this call merged. A retry of this very call (same token) finds
-- its own merge and answers OK again; any other second merge gets MERGED. Inherited messages
-- and messages the parent already holds are not appended again.
local bad = wrong_type({'hash', 'list', 'hash', 'hash', 'list', 'hash', 'zset', 'zset'})
if bad then return {WRONG_TYPE, bad} end
local st = child_state(KEYS[1], ARGV[4])
if st == MERGED then
  local f = redis.call('HMGET', KEYS[1], 'merge_token', 'merged_at')
  if f[1] == ARGV[5] then return {OK, f[2], 0} end
  return {MERGED}
end
if st ~= OK then return {st} end
local pst = session_state(KEYS[4], KEYS[6])
if pst ~= OK then return {PARENT_GONE, pst} end
local k = other_key(KEYS[4], ARGV[11])
if k then return {KEY_CHANGED, k} end

local added = 0
if ARGV[6] == 'summary' then
  if not has_digest(KEYS[6], ARGV[7]) then
    redis.call('RPUSH', KEYS[5], ARGV[8])
    add_digest(KEYS[6], ARGV[7])
    added = 1
  end
else
  for _, m in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    local d = string.sub(m, 1, 8)
    if d ~= INHERITED and not has_digest(KEYS[6], d) then
      redis.call('RPUSH', KEYS[5], string.sub(m, 9))
      add_digest(KEYS[6], d)
      added = added + 1
    end
  end
end
local max = tonumber(ARGV[3])
if max > 0 and added > 0 then redis.call('LTRIM', KEYS[5], -max, -1) end
local us = bump(KEYS[4], KEYS[5], KEYS[6], KEYS[8], ARGV[4], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'merged_at', us, 'merge_token', ARGV[5])
touch({KEYS[1], KEYS[2], KEYS[7]}, KEYS[3], ARGV[1], ARGV[2])
emit(ARGV[9], ARGV[10])
return {OK, us, added}
