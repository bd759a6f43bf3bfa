-- children_of: read every child of a session in one snapshot (their messages up to a byte
-- budget: the rest of a long child is read in steps, read_range). Read-only.
-- KEYS: kids parent_meta *children
-- ARGV: budget *child_keys
-- OK: key_record children
-- KEYS[1] the parent's kids zset   KEYS[2] the parent's meta hash
-- KEYS[3 ..] child meta hash, child msgs list for each child, in the order the caller read
--         them from KEYS[1]
-- ARGV[1] bytes to read at most   ARGV[2 ..] the child keys, as read from KEYS[1]
-- Reply: {OK, {the parent's k, dk}, {meta flat array, stored elements from the child's head,
--        upto, n}, ...} (an empty
--        meta array: the child's record is missing) | {CONFLICT} (the children changed since
--        they were read) | {WRONG_TYPE, i, type} | {DAMAGED, 1, 'members', found, recorded} (the kids
--        zset lost members: evicted)
local kc = redis.call('HGET', KEYS[2], 'kc')
local count = redis.call('ZCARD', KEYS[1])
if kc and tonumber(kc) ~= count then return {DAMAGED, 1, 'members', count, tonumber(kc)} end
if count ~= #ARGV - 1 then return {CONFLICT} end
for i = 2, #ARGV do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then return {CONFLICT} end
end
local p = redis.call('HMGET', KEYS[2], 'k', 'dk')
local reply, budget = {OK, {p[1] or '', p[2] or ''}}, tonumber(ARGV[1])
for i = 3, #KEYS, 2 do
  local meta = redis.pcall('HGETALL', KEYS[i])
  if failed(meta) then return refusal(meta, i) end
  local f = redis.call('HMGET', KEYS[i], 'g', 'h', 'n')
  local g, h, n = positions(f[1], f[2], f[3], i + 1)
  if not g then return h end
  local items, upto = read_from(i + 1, h, h, n, math.max(budget, 1))
  for _, e in ipairs(items) do budget = budget - #e end
  reply[#reply + 1] = {meta, items, upto, n}
end
return reply
