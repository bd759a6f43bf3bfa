-- reseal_session: replace a session's elements and metadata values by their re-sealed forms,
-- each only if it is still what the caller read; clear the pending mark.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] kids zset
-- KEYS[4 ..] each child's meta hash and msgs list, in the order of ARGV[3 .. 2+c]
-- ARGV[1] the session's key id (set by rekey_session)
-- ARGV[2] c = number of children, ARGV[3 .. 2+c] their keys as read from KEYS[3]
-- then, for each list (the session's, then each child's): n, and n pairs old, new element
-- then m, and m quads: old field, old value, new field, new value (metadata)
-- Reply: {OK, values replaced} | {NOT_FOUND} | {CONFLICT} (another key, or the children
--        changed since they were read: read again)
-- Events: none. TTL and updated_at are left alone. Elements appended, trimmed or compacted
-- away since the caller read them are simply not found. A list with replaced elements begins
-- a new generation (readers holding it read it again).
if redis.call('EXISTS', KEYS[1]) == 0 then return {NOT_FOUND} end
if redis.call('HGET', KEYS[1], 'k') ~= ARGV[1] then return {CONFLICT} end
local c = tonumber(ARGV[2])
if redis.call('ZCARD', KEYS[3]) ~= c then return {CONFLICT} end
for i = 3, 2 + c do
  if not redis.call('ZSCORE', KEYS[3], ARGV[i]) then return {CONFLICT} end
end

local at, replaced = 3 + c, 0
for j = 0, c do
  local meta, key = KEYS[1], KEYS[2]
  if j > 0 then meta, key = KEYS[2 + 2 * j], KEYS[3 + 2 * j] end
  local n = tonumber(ARGV[at])
  local swap = {}
  for i = at + 1, at + 2 * n, 2 do swap[ARGV[i]] = ARGV[i + 1] end
  at = at + 2 * n + 1
  if n > 0 then
    local before = replaced
    for i, v in ipairs(redis.call('LRANGE', key, 0, -1)) do
      local new = swap[v]
      if new then
        redis.call('LSET', key, i - 1, new)
        replaced = replaced + 1
      end
    end
    if replaced > before and redis.call('HEXISTS', meta, 'n') == 1 then
      redis.call('HINCRBY', meta, 'g', 1)
    end
  end
end
local m = tonumber(ARGV[at])
for i = at + 1, at + 4 * m, 4 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    if ARGV[i] ~= ARGV[i + 2] then redis.call('HDEL', KEYS[1], ARGV[i]) end
    redis.call('HSET', KEYS[1], ARGV[i + 2], ARGV[i + 3])
    replaced = replaced + 1
  end
end
redis.call('HDEL', KEYS[1], 'r')
if m > 0 then redis.call('HDEL', KEYS[1], 'mb') end  -- sizes changed: counted again when needed
return {OK, replaced}
