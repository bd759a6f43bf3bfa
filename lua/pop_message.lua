-- pop_message: remove and return the newest message of a session (idempotent per call token).
-- KEYS: root pop *members
-- ARGV: head session_key call_token digest expect kid keep_ms
-- OK: element
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the session's pop key
-- KEYS[9 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] session key   ARGV[6] call token   ARGV[7] its digest
-- ARGV[8] expected prefix of the newest message ('{"id":"<id>",'), or ''
-- ARGV[9] the caller's key id for the session ('' = cleartext)
-- ARGV[10] how long the popped element is kept for a retry of this call (ms)
-- Reply: {OK, element} | {OK} (the history is empty) | {STALE} (the newest message is not the
--        expected one) | {MISSING} (this call popped, and its element is no longer kept)
--        | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k, dk} | {WRONG_TYPE, i, type} | {TREE_CHANGED, ...}
--        | {DAMAGED, ...}
-- Events: none. The popped message's id stays in the window (re-appending it stores nothing
-- while it is there). A call retried after a lost reply finds its token in the window and gets
-- the element it popped from the pop key (kept ARGV[10] ms, never past the tree's deadline),
-- popping nothing more. The list begins a new generation; the popped message's count leaves
-- the tokens the session holds (its token sums, see the prelude).
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'tg', 'g', 'h', 'n')
local refused = root_refused(f)
if refused then return refused end
if (f[2] or '') ~= ARGV[9] then return key_changed(f[2]) end
local us, now = clock()
local ttl = tonumber(ARGV[1])
local extend_now = due(f[3], ttl, now)
if extend_now and (f[4] or '0') ~= ARGV[3] then return tree_changed(f[4]) end
local g, h, n = positions(f[5], f[6], f[7], 2)
if not g then return h end
local win, stop = open_window(3, f[7], 7, 7, 1)
if not win then return stop end
if has(win, ARGV[7]) then
  local kept = redis.call('GET', KEYS[8])
  if kept and string.sub(kept, 1, #ARGV[6]) == ARGV[6] then return {OK, string.sub(kept, #ARGV[6] + 1)} end
  return {MISSING}
end
local top = redis.call('LINDEX', KEYS[2], -1)
if not top then return {OK} end
local expect = ARGV[8]
if expect ~= '' and string.sub(top, 1, #expect) ~= expect then return {STALE} end

local fr = sums_frame(3, nil, nil, nil, g, h, n)  -- the sums end before the popped entry
redis.call('HSET', KEYS[1], 'updated_at', us, 'g', g + 1, 'h', 0, 'n', n - h - 1)
if fr then
  redis.call('HSET', KEYS[3], 'sg', g + 1, 'so', fr[1] + h)
  local S = sums_tools()
  local cut = S.cut(3, n - 2 + fr[1])
  if cut then redis.call('HSET', KEYS[3], cut[1], cut[2]) end
  S.drop(3, math.ceil((n - 1 + fr[1]) / SUM_SPAN), math.ceil((n + fr[1]) / SUM_SPAN))
else
  redis.call('HDEL', KEYS[3], 'sg')
end
redis.call('RPOP', KEYS[2])
local keep = now + tonumber(ARGV[10])
if f[3] then keep = math.min(keep, tonumber(f[3])) end
redis.call('SET', KEYS[8], ARGV[6] .. top, 'PXAT', keep)
add(win, {ARGV[7]}, tonumber(ARGV[4]))
save_window(win)
redis.call('ZADD', KEYS[4], now, ARGV[5])
if extend_now then extend(9, ttl, tonumber(ARGV[2]), now) end
return {OK, top}
