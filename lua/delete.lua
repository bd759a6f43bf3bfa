-- delete: remove a session, its messages, its expiry marker, its index entry and every child.
-- KEYS: root pop turn wake log *children
-- ARGV: session_key events event *child_keys
-- OK: existed event_id
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the session's pop key
-- KEYS[9] its turn key   KEYS[10] its wake list   KEYS[11] the tree's event log stream
-- KEYS[12 ..] child meta, child msgs, child ids, child staging list for each child, in the
--         order the caller read them from KEYS[6]
-- ARGV[1] session key (index member)   ARGV[2 .. 5] the events group (see log_event)
-- ARGV[6] the event's fields (JSON members)   ARGV[7 ..] the child keys, as read from KEYS[6]
-- Reply: {OK, 1 if a live session was removed else 0, the event's id ('' if none)}
--        | {CONFLICT} (children changed since they were read: nothing removed; read again)
--        | {WRONG_TYPE, i, type} | {DAMAGED, i, 'foreign'} (KEYS[i] is another program's key, a
--        value of another type or a hash without a schema version: nothing removed)
-- Events: 'delete', only when a live session was removed; 'expire' when none was but the index
-- still listed a tree under the key (it ended unseen: no reaper logged it yet). Idempotent
-- otherwise. Values are
-- freed by UNLINK (in the background when large), so a huge session does not block Redis.
local types = {'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'string', 'string', 'list',
  'stream'}
for i = 12, #KEYS, 4 do types[i], types[i + 1], types[i + 2], types[i + 3] = 'hash', 'list', 'hash', 'list' end
local bad = wrong_type(types)
if bad then return bad end
local metas = {1}  -- the session's and every child's: hashes this store wrote hold 'v'
for i = 12, #KEYS, 4 do metas[#metas + 1] = i end
for _, i in ipairs(metas) do
  if redis.call('EXISTS', KEYS[i]) == 1 and not redis.call('HGET', KEYS[i], 'v') then
    return {DAMAGED, i, 'foreign'}
  end
end
if redis.call('ZCARD', KEYS[6]) ~= #ARGV - 6 then return {CONFLICT} end
for i = 7, #ARGV do
  if not redis.call('ZSCORE', KEYS[6], ARGV[i]) then return {CONFLICT} end
end
local existed = redis.call('EXISTS', KEYS[1])
local listed = redis.call('ZSCORE', KEYS[4], ARGV[1])
for i = 1, #KEYS, 1000 do
  local chunk = {}
  for j = i, math.min(i + 999, #KEYS) do
    if j ~= 4 and j ~= 11 then chunk[#chunk + 1] = KEYS[j] end
  end
  if #chunk > 0 then redis.call('UNLINK', unpack(chunk)) end
end
redis.call('ZREM', KEYS[4], ARGV[1])
local id = ''
if existed == 1 or listed then
  local t = redis.call('TIME')
  id = log_event(11, 2, existed == 1 and 'delete' or 'expire', ARGV[6], t[1] * 1000 + math.floor(t[2] / 1000))
end
return {OK, existed, id}
