-- cleanup_failed_turn: discard a session's live children and append one message (the answers
-- of its open tool calls), in one step.
-- KEYS: root turn log *members
-- ARGV: head session_key kid max_messages fence expect_last events tag element notice_tag notice max_tokens *children
-- OK: appended tree_generation event_ids
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the session's turn key
-- KEYS[9] the tree's event log stream   KEYS[10 ..] the tree's members (meta, msgs, ids each)
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] session key (index member)   ARGV[6] key id the element is sealed with ('' = cleartext)
-- ARGV[7] max messages (0 = all)   ARGV[8] the turn's value the write is made through ('' = none)
-- ARGV[9] the newest message expected ('.' = the session is empty, else the newest element's
--   prefix '{"id":"<id>",')   ARGV[10 .. 13] the events group (see log_event)
-- ARGV[14] the answers' tag (codec.message_tag: 8-byte id digest, token count)
-- ARGV[15] their stored element ('' '': no call is open)
-- ARGV[16], ARGV[17] the same of a message appended after them (a notice), or '' ''
-- ARGV[18] the cap on the tokens the session holds (0 = none; as append_message's ARGV[12])
-- ARGV[19 ..] per member, in KEYS order: its child key, the fields of its 'discard' event
-- Reply: {OK, messages appended (0: a retry of this call, which finds its digest), the new tree
--        generation, per member the id of its 'discard' event when it was discarded ('' with
--        no log), else 0} | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k, dk}
--        | {WRONG_TYPE, i, type} | {TREE_CHANGED, ...} (the members are not the caller's: it
--        sends them again) | {DAMAGED, ...} | {TURN_LOST} | {STALE, the newest message's id}
-- Events: 'discard' for each live child discarded. A child under another call's merge lease
-- (a merge under way) or merged is left in place. The live children go as discard_child
-- removes one (keys, member, tombstone 'd'); the messages are appended as append_message
-- appends them (the id window, the token sums, trimmed to max messages and max tokens), so
-- that nothing between is ever seen.
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'tg', 'g', 'h', 'n')
local refused = root_refused(f)
if refused then return refused end
if (f[2] or '') ~= ARGV[6] then return key_changed(f[2]) end
if (f[4] or '0') ~= ARGV[3] then return tree_changed(f[4]) end
local us, now = clock()
local ttl = tonumber(ARGV[1])
local g, h, n = positions(f[5], f[6], f[7], 2)
if not g then return h end
local digests, elements, tokens = {}, {}, {}
for i = 14, 16, 2 do
  if ARGV[i] ~= '' then
    digests[#digests + 1], elements[#elements + 1] = string.sub(ARGV[i], 1, 8), ARGV[i + 1]
    tokens[#tokens + 1] = (tag_parts(ARGV[i]))
  end
end
local win, stop = open_window(3, f[7], 1, 0, 1, digests)
if not win then return stop end
local reply = {OK, 0, f[4] or '0'}
if has(win, digests[1]) then return reply end  -- this call was applied: nothing more
refused = fence_refused(8, ARGV[8]) or expect_refused(2, n, h, 0, ARGV[9]) or log_refused(9)
if refused then return refused end
local fr = sums_frame(3, nil, nil, nil, g, h, n)  -- the token sums (nil: unknown)
local max = tonumber(ARGV[7])
local h2 = h
if max > 0 and n + #elements - h > max then h2 = n + #elements - max end
local S  -- the token sums' tools, where the trim by tokens built them
fr, h2, S = sums_trim(3, fr, h, n, tokens, tonumber(ARGV[18]), h2)
local live = {}
for i = 10, #KEYS, 3 do
  local c = redis.pcall('HMGET', KEYS[i], 'v', 'merged_at', 'mt', 'mx')
  if failed(c) then return refusal(c, i) end
  live[#live + 1] = c[1] and not c[2] and not leased(c[3], c[4], now, '') or false
end

local z = redis.pcall('ZADD', KEYS[4], now, ARGV[5])
if failed(z) then return refusal(z, 4) end
local tg = tonumber(f[4] or '0')
for m, alive in ipairs(live) do
  local child = ARGV[17 + 2 * m]
  reply[3 + m] = 0
  if alive then
    local k = 7 + 3 * m
    redis.call('UNLINK', KEYS[k], KEYS[k + 1], KEYS[k + 2])
    redis.call('ZREM', KEYS[6], child)
    tombstone('d', child, us)
    reply[3 + m] = log_event(9, 10, 'discard', ARGV[18 + 2 * m], now)
    tg = tg + 1
  end
end
local sums, base = sums_write(3, fr, h, n, tokens, h2, S)
push_all(KEYS[2], elements)
add(win, digests, tonumber(ARGV[4]))
sums_into(win, sums)
save_window(win)
n = n + #elements
if h2 > h then redis.call('LTRIM', KEYS[2], h2 - h, -1) end
h = h2
redis.call('HSET', KEYS[1], 'updated_at', us, 'g', g, 'h', h, 'n', n, 'tg', tg,
  'kc', redis.call('ZCARD', KEYS[6]))
sums_base(3, fr, sums, base)
if due(f[3], ttl, now) then
  extend(10, ttl, tonumber(ARGV[2]), now)
elseif n - h == #elements then
  join_tree(f[3], {2})
end
reply[2], reply[3] = #elements, tg
return reply
