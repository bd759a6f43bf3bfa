-- rewind: remove every message of a session after a given one, atomically.
-- KEYS: root turn log *members
-- ARGV: head session_key call_digest generation keep tail last events event fence
-- OK: removed event_id again
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the session's turn key
-- KEYS[9] the tree's event log stream   KEYS[10 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] session key   ARGV[6] the call's token digest (8 bytes; the meta field 'rw' keeps the
--   digests and counts of the session's last 8 rewinds: a retry of one of those calls answers
--   what it did, and does nothing more)
-- ARGV[7] the generation g the caller read   ARGV[8] keep: the absolute position after the
--   last message kept (the list keeps h .. keep - 1; -1: only answer a call made before, else
--   STALE)   ARGV[9] the tail n the caller read
-- ARGV[10] the prefix of the message at keep - 1 ('{"id":"<id>",'; '' when keep = h)
-- ARGV[11 .. 14] the events group (see log_event)   ARGV[15] the event's fields (JSON members)
-- ARGV[16] the turn's value the rewind is made through ('' = none: not fenced)
-- Reply: {OK, messages removed, the event's id ('' if none), 1 when it answers a call made
--        before (it did nothing now) else 0} | {STALE} (the history is not
--        what the caller read: it reads again) | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i, type}
--        | {TREE_CHANGED, ...} | {DAMAGED, ...} | {TURN_LOST}
-- Events: 'rewind', only when this call removed messages. A rewind that removes nothing writes
-- nothing (no TTL refresh, no updated_at).
-- The caller found the kept message in a read of generation g ending at n: a history that
-- changed since (an append, a trim, a pop, a compaction) is STALE, so the count it read is the
-- count removed. The removed messages' ids stay in the id window, as a pop's do. The list
-- begins a new generation, so that no reader's held copy of the removed tail is served again.
-- The removed messages' counts leave the tokens the session holds (its token sums).
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'tg', 'g', 'h', 'n', 'rw')
local refused = root_refused(f)
if refused then return refused end
local done = f[8] or ''
for i = 1, #done - 17, 18 do
  if string.sub(done, i, i + 7) == ARGV[6] then return {OK, tonumber(string.sub(done, i + 8, i + 17)), '', 1} end
end
local us, now = clock()
local ttl = tonumber(ARGV[1])
local extend_now = due(f[3], ttl, now)
if extend_now and (f[4] or '0') ~= ARGV[3] then return tree_changed(f[4]) end
local g, h, n = positions(f[5], f[6], f[7], 2)
if not g then return h end
local fenced = fence_refused(8, ARGV[16]) or log_refused(9)
if fenced then return fenced end
local keep = tonumber(ARGV[8])
if tostring(g) ~= ARGV[7] or tostring(n) ~= ARGV[9] or not keep or keep < h or keep > n then
  return {STALE}
end
if ARGV[10] ~= '' then
  local m = redis.call('LINDEX', KEYS[2], keep - 1 - h)
  if not m or string.sub(m, 1, #ARGV[10]) ~= ARGV[10] then return {STALE} end
end
local removed = n - keep
if removed == 0 then return {OK, 0, '', 0} end
local fr = sums_frame(3, nil, nil, nil, g, h, n)  -- the sums end at the last kept entry

if keep == h then redis.call('UNLINK', KEYS[2]) else redis.call('LTRIM', KEYS[2], 0, keep - 1 - h) end
redis.call('HSET', KEYS[1], 'updated_at', us, 'g', g + 1, 'h', 0, 'n', keep - h,
  'rw', string.sub(done .. ARGV[6] .. string.format('%010d', removed), -144))
if fr then
  redis.call('HSET', KEYS[3], 'sg', g + 1, 'so', fr[1] + h)
  local S = sums_tools()
  local cut = S.cut(3, keep - 1 + fr[1])
  if cut then redis.call('HSET', KEYS[3], cut[1], cut[2]) end
  S.drop(3, math.ceil((keep + fr[1]) / SUM_SPAN), math.ceil((n + fr[1]) / SUM_SPAN))
else
  redis.call('HDEL', KEYS[3], 'sg')
end
redis.call('ZADD', KEYS[4], now, ARGV[5])
if extend_now then extend(10, ttl, tonumber(ARGV[2]), now) end
return {OK, removed, log_event(9, 11, 'rewind', ARGV[15], now), 0}
