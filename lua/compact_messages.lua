-- compact_messages: replace messages 0..up_to (inclusive) with one summary message, first.
-- KEYS: root turn log *members
-- ARGV: head session_key up_to tag element expect events event kid fence
-- OK: removed event_id reclaimed_tokens
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the session's turn key
-- KEYS[9] the tree's event log stream   KEYS[10 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] session key   ARGV[6] up_to (0-based, inclusive)
-- ARGV[7] the summary's tag (codec.message_tag: its 8-byte id digest, then its token count)
-- ARGV[8] summary element   ARGV[9] expected prefix of message up_to ('{"id":"<id>",'), or ''
-- ARGV[10 .. 13] the events group (see log_event)   ARGV[14] the event's fields (JSON members)
-- ARGV[15] key id the summary is sealed with ('' = cleartext)
-- ARGV[16] the turn's value the compaction is made through ('' = none: not fenced)
-- Reply: {OK, messages removed, the event's id ('' if none), the tokens the removed messages
--        held (false: the session's token sums are unknown)} | {OUT_OF_RANGE, length} | {STALE} | {NOT_FOUND} | {EXPIRED}
--        | {KEY_CHANGED, k, dk} | {WRONG_TYPE, i, type} | {TREE_CHANGED, ...} | {DAMAGED, ...}
--        | {TURN_LOST}
-- Events: 'compact', only when this call compacted; with the session's token sums known, its
-- fields end with "reclaimed_tokens" (the removed messages' tokens; the caller's fields carry
-- "summary_tokens"). The summary's count replaces theirs in the tokens the session holds.
-- Messages appended after the caller read the history stay after the summary. A retried call
-- (the summary's digest in the window) changes nothing and answers {OK, 0, ''}. With an expected
-- id, a history that no longer reaches up_to is STALE (it changed since it was read), not out
-- of range. The list begins a new generation.
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'tg', 'g', 'h', 'n')
local refused = root_refused(f)
if refused then return refused end
if (f[2] or '') ~= ARGV[15] then return key_changed(f[2]) end
local us, now = clock()
local ttl = tonumber(ARGV[1])
local extend_now = due(f[3], ttl, now)
if extend_now and (f[4] or '0') ~= ARGV[3] then return tree_changed(f[4]) end
local g, h, n = positions(f[5], f[6], f[7], 2)
if not g then return h end
local digest = string.sub(ARGV[7], 1, 8)
local win, stop = open_window(3, f[7], 1, 0, 1, {digest})
if not win then return stop end
if has(win, digest) then return {OK, 0, '', false} end
local fenced = fence_refused(8, ARGV[16]) or log_refused(9)
if fenced then return fenced end
local up_to, len, expect = tonumber(ARGV[6]), n - h, ARGV[9]
if up_to >= len and expect ~= '' then return {STALE} end
if up_to < 0 or up_to >= len then return {OUT_OF_RANGE, len} end
if expect ~= '' then
  local m = redis.call('LINDEX', KEYS[2], up_to)
  if string.sub(m, 1, #expect) ~= expect then return {STALE} end
end
-- the token sums: the summary takes the last removed message's entry (the counts through it,
-- as before), and the counts before the head become that entry less the summary's count
local fr = sums_frame(3, nil, nil, nil, g, h, n)
local v = h + up_to + (fr and fr[1] or 0)
local S = sums_tools()
local kept = fr and S.at(3, v)  -- the counts through the last removed message
local reclaimed = kept and kept - fr[2]
local base = kept and kept - (tag_parts(ARGV[7]))

redis.call('HSET', KEYS[1], 'updated_at', us, 'g', g + 1, 'h', 0, 'n', len - up_to)
if base and base >= -SUM_LIMIT then
  redis.call('HSET', KEYS[3], 'sg', g + 1, 'so', v, 'sb', base)
  S.drop(3, math.floor((h - 1 + fr[1]) / SUM_SPAN), math.floor((v - 1) / SUM_SPAN))
else
  redis.call('HDEL', KEYS[3], 'sg')
  reclaimed = false
end
redis.call('LTRIM', KEYS[2], up_to + 1, -1)
redis.call('LPUSH', KEYS[2], ARGV[8])
add(win, {digest}, tonumber(ARGV[4]))
save_window(win)
redis.call('ZADD', KEYS[4], now, ARGV[5])
if extend_now then extend(10, ttl, tonumber(ARGV[2]), now) else join_tree(f[3], {2}) end
local fields = ARGV[14]
if reclaimed then fields = fields .. ',"reclaimed_tokens":' .. string.format('%.0f', reclaimed) end
return {OK, up_to + 1, log_event(9, 10, 'compact', fields, now), reclaimed}
