-- append_child_message: append messages to a live, unmerged child only; trim to its max.
-- KEYS: root child_meta child_msgs child_ids turn usage *members
-- ARGV: head parent_key child_key kid fence expect_last budget *messages
-- OK: appended trimmed
-- KEYS[1..7] the tree's root keys (the parent's; see the prelude)
-- KEYS[8] child meta hash   KEYS[9] child msgs list   KEYS[10] child ids hash
-- KEYS[11] the parent's turn key   KEYS[12] the usage totals of the prefix (see append_message)
-- KEYS[13 ..] the tree's members as the caller knows them
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] parent key   ARGV[6] child key
-- ARGV[7] key id the elements are sealed with ('' = cleartext); it must be the parent's
-- ARGV[8] the parent's turn value the write is made through ('' = none)
-- ARGV[9] the child's newest message expected ('' = none, '.' = empty, else its prefix)
-- ARGV[10] the store's usage budget in tokens (0 = none), which the child's own usage (meta
--   fields ui, uo, ur: its messages' usage, added to the parent's when it is merged) is held to
-- ARGV[11 ..] message pairs: tag (codec.message_tag: 8-byte id digest, token count, usage),
--   stored element (digest .. JSON or sealed)
-- Reply: {OK, number appended, number trimmed from the head} | {NOT_FOUND} | {PRUNED, merged_at} | {MERGED}
--        | {KEY_CHANGED, k, dk} | {WRONG_TYPE, i, type} | {TREE_CHANGED, ...} | {DAMAGED, ...}
--        | {TURN_LOST} | {STALE, the child's newest message's id} | {OVER_BUDGET, usage, budget}
-- Events: none. The parent's messages are untouched; its updated_at and index entry are
-- refreshed and the tree kept alive, so a sub-agent at work keeps its parent alive. Ids in the
-- child's id window (at least the id window, or its max messages when larger) are skipped.
-- The new messages' counts join the child's token sums (see the prelude).
local bad = wrong_type({'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'hash', 'list',
  'hash'})
if bad then return bad end
local c = redis.call('HMGET', KEYS[8], 'parent', 'merged_at', 'max', 'g', 'h', 'n', 'mt', 'mx',
  'ui', 'uo', 'ur')
local st = child_state(c, ARGV[5], ARGV[6])
if st == MERGED then return {MERGED} end
if st ~= OK then return st end
local f = redis.call('HMGET', KEYS[1], 'v', 'k', 'x', 'tg')
if not f[1] then return gone(1, 2, 3, 5) end
if f[1] ~= SCHEMA then return {DAMAGED, 1, 'version', f[1]} end
if (f[2] or '') ~= ARGV[7] then return key_changed(f[2]) end
local us, now = clock()
if leased(c[7], c[8], now, '') then return {MERGED} end  -- a large merge of it is under way
local ttl = tonumber(ARGV[1])
local extend_now = due(f[3], ttl, now)
if extend_now and (f[4] or '0') ~= ARGV[3] then return tree_changed(f[4]) end
local g, h, n = positions(c[4], c[5], c[6], 9)
if not g then return h end
local win, stop = open_window(10, c[6], 11, #ARGV, 2)
if not win then return stop end

local digests, elements, spent, tokens = {}, {}, {}, {}
for i = 11, #ARGV, 2 do
  local tag = ARGV[i]
  local d = string.sub(tag, 1, 8)
  if not has(win, d) then
    digests[#digests + 1] = d
    elements[#elements + 1] = ARGV[i + 1]
    local t, u = tag_parts(tag)
    tokens[#tokens + 1] = t
    if u then spent[#spent + 1] = u end
  end
end
if #digests == 0 then return {OK, 0, 0} end
local refused = fence_refused(11, ARGV[8]) or expect_refused(9, n, h, 8, ARGV[9])
  or usage_damaged(8, {c[9], c[10], c[11]}) or budget_refused(c[9], c[10], nil, ARGV[10])
if refused then return refused end
local totals
if #spent > 0 then
  totals, refused = read_totals(12)
  if refused then return refused end
end
local max = tonumber(c[3] or '0')
local n2 = n + #elements
local h2 = h
if max > 0 and n2 - h > max then h2 = n2 - max end
local fr = sums_frame(10, nil, nil, nil, g, h, n)
local new_keys = {}  -- keys this call creates join the tree's deadline
if n == h then new_keys[#new_keys + 1] = 9 end
local sums, base = sums_write(10, fr, h, n, tokens, h2)
push_all(KEYS[9], elements)
local trimmed = h2 - h
if trimmed > 0 then redis.call('LTRIM', KEYS[9], trimmed, -1) end
h, n = h2, n2
add(win, digests, math.max(tonumber(ARGV[4]), max))
sums_into(win, sums)
save_window(win)
redis.call('HSET', KEYS[8], 'g', g, 'h', h, 'n', n)
sums_base(10, fr, sums, base)
if totals then
  local add = spent_usage(spent)
  set_figures(8, {c[9], c[10], c[11]}, add)
  set_figures(12, totals, add)
end
redis.call('HSET', KEYS[1], 'updated_at', us)
redis.call('ZADD', KEYS[4], now, ARGV[5])
if extend_now then extend(13, ttl, tonumber(ARGV[2]), now) else join_tree(f[3], new_keys) end
return {OK, #digests, trimmed}
