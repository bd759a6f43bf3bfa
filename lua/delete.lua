-- delete: remove a session, its messages, its expiry marker, its index entry and every child.
-- KEYS: root pop turn wake log gone *child_records
-- ARGV: session_key call_token gone_ms events event *children
-- OK: existed event_id event_ids
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the session's pop key
-- KEYS[9] its turn key   KEYS[10] its wake list   KEYS[11] the tree's event log stream
-- KEYS[12] the session's 'gone' string (a delete's call token, kept after the delete)
-- KEYS[13 ..] child meta, child msgs, child ids, child staging list for each child, in the
--         order the caller read them from KEYS[6]
-- ARGV[1] session key (index member)   ARGV[2] this call's token ('': none)
-- ARGV[3] how long KEYS[12] keeps it, ms (0: not kept)   ARGV[4 .. 7] the events group (see
--         log_event)   ARGV[8] the event's fields (JSON members)   ARGV[9 ..] per child, as read
--         from KEYS[6]: its key, the fields of its 'discard' event ('' for a damaged member: none)
-- Reply: {OK, 1 if a live session was removed else 0, the event's id ('' if none), per child
--        the id of its 'discard' event ('' with no log), or 0 when it was not live}
--        | {OK, 1, ''} when KEYS[12] holds ARGV[2]: a retry of a delete that removed the session
--          (the caller's own, after a lost reply): nothing done again (a session created under
--          the key since stays), no event
--        | {CONFLICT} (children changed since they were read: nothing removed; read again)
--        | {WRONG_TYPE, i, type} | {DAMAGED, i, 'foreign'} (KEYS[i] is another program's key, a
--        value of another type or a hash without a schema version: nothing removed)
-- Events: 'discard' for each live (unmerged) child of a live session removed, then 'delete';
-- 'expire' when no live session was removed but the index
-- still listed a tree under the key (it ended unseen: no reaper logged it yet). Idempotent
-- otherwise. Values are
-- freed by UNLINK (in the background when large), so a huge session does not block Redis.
-- When no session is left in the index (KEYS[4]) and no consumer group reads the event log,
-- the log expires after ARGV[3] ms (a prefix used and emptied leaves no key for ever).
local types = {'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'string', 'string', 'list',
  'stream', 'string'}
local bad = wrong_type(with_children(types, 13))
if bad then return bad end
if ARGV[2] ~= '' and redis.call('GET', KEYS[12]) == ARGV[2] then
  return {OK, 1, ''}
end
local metas = {1}  -- the session's and every child's: hashes this store wrote hold 'v'
for i = 13, #KEYS, 4 do metas[#metas + 1] = i end
for _, i in ipairs(metas) do
  if redis.call('EXISTS', KEYS[i]) == 1 and not redis.call('HGET', KEYS[i], 'v') then
    return {DAMAGED, i, 'foreign'}
  end
end
if redis.call('ZCARD', KEYS[6]) ~= (#ARGV - 8) / 2 then return {CONFLICT} end
for i = 9, #ARGV, 2 do
  if not redis.call('ZSCORE', KEYS[6], ARGV[i]) then return {CONFLICT} end
end
local existed = redis.call('EXISTS', KEYS[1])
local live = {}  -- per child: whether it is live (a child of a live session, not merged)
for n = 1, (#ARGV - 8) / 2 do
  local c = redis.call('HMGET', KEYS[9 + 4 * n], 'v', 'merged_at')
  live[n] = existed == 1 and c[1] ~= false and not c[2] and ARGV[8 + 2 * n] ~= ''
end
local listed = redis.call('ZSCORE', KEYS[4], ARGV[1])
for i = 1, #KEYS, 1000 do
  local chunk = {}
  for j = i, math.min(i + 999, #KEYS) do
    if j ~= 4 and j ~= 11 and j ~= 12 then chunk[#chunk + 1] = KEYS[j] end
  end
  if #chunk > 0 then redis.call('UNLINK', unpack(chunk)) end
end
redis.call('ZREM', KEYS[4], ARGV[1])
if existed == 1 and ARGV[2] ~= '' and tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[12], ARGV[2], 'PX', ARGV[3])
end
local reply = {OK, existed, ''}
if existed == 1 or listed then
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  for n, yes in ipairs(live) do
    reply[3 + n] = yes and log_event(11, 4, 'discard', ARGV[8 + 2 * n], now) or 0
  end
  reply[3] = log_event(11, 4, existed == 1 and 'delete' or 'expire', ARGV[8], now)
end
-- The last session of the index is gone: its event log, which no consumer group reads, lingers
-- as long as KEYS[12] (for readers behind), then expires with nothing left under the prefix.
if tonumber(ARGV[3]) > 0 and redis.call('ZCARD', KEYS[4]) == 0
    and redis.call('EXISTS', KEYS[11]) == 1 and #redis.call('XINFO', 'GROUPS', KEYS[11]) == 0 then
  local ttl = redis.call('PTTL', KEYS[11])
  if ttl < 0 or ttl > tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[11], ARGV[3]) end
end
return reply
