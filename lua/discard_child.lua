-- discard_child: remove an unmerged child without touching its parent.
-- KEYS[1] child meta hash   KEYS[2] child msgs list   KEYS[3] child ids hash
-- KEYS[4] parent's kids zset
-- ARGV[1] parent key   ARGV[2] child key   ARGV[3] call token   ARGV[4] tombstone life ms
-- ARGV[5] events channel ('' = none)   ARGV[6] 'discard' event JSON
-- Reply: {OK} | {NOT_FOUND} | {MERGED} | {WRONG_TYPE, i}
-- Events: 'discard', only when this call discarded. The child's hash stays for ARGV[4] ms as
-- a tombstone holding the token, so a retry of this very call answers OK again.
local bad = wrong_type({'hash', 'list', 'hash', 'zset'})
if bad then return {WRONG_TYPE, bad} end
local f = redis.call('HMGET', KEYS[1], 'parent', 'discarded', 'merged_at')
if not f[1] or f[1] ~= ARGV[1] then return {NOT_FOUND} end
if f[2] then
  if f[2] == ARGV[3] then return {OK} end
  return {NOT_FOUND}
end
if f[3] then return {MERGED} end

redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local life = tonumber(ARGV[4])
if life > 0 then
  redis.call('HSET', KEYS[1], 'parent', ARGV[1], 'discarded', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], life)
end
redis.call('ZREM', KEYS[4], ARGV[2])
emit(ARGV[5], ARGV[6])
return {OK}
