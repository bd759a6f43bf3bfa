-- children_of: read every child of a session in one snapshot. Read-only.
-- KEYS[1] the parent's kids zset   KEYS[2 ..] child meta hash, child msgs list for each child,
--         in the order the caller read them from KEYS[1]
-- ARGV[1 ..] the child keys, as read from KEYS[1]
-- Reply: {OK, {meta flat array, stored elements}, ...} (an empty meta array: the child's
--        record is missing) | {CONFLICT} (the children changed since they were read)
--        | {WRONG_TYPE, i}
if redis.call('ZCARD', KEYS[1]) ~= #ARGV then return {CONFLICT} end
for i = 1, #ARGV do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then return {CONFLICT} end
end
local reply = {OK}
for i = 2, #KEYS, 2 do
  local meta = redis.pcall('HGETALL', KEYS[i])
  if failed(meta) then return refusal(meta, i) end
  local items = redis.pcall('LRANGE', KEYS[i + 1], 0, -1)
  if failed(items) then return refusal(items, i + 1) end
  reply[#reply + 1] = {meta, items}
end
return reply
