-- append_message: append messages, skip ids already appended, trim, keep the tree alive;
-- set metadata entries along with them when at least one message is new.
-- KEYS: root turn usage *members
-- ARGV: head max_messages session_key kid max_metadata_bytes fence expect_last budget max_tokens #metadata *messages
-- OK: appended trimmed
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the session's turn key
-- KEYS[9] the usage totals of the prefix (of the slot's index shard on a cluster: a hash of
--   ui, uo, ur, which the new messages' usage is added to as well)
-- KEYS[10 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] max messages (0 = all)   ARGV[6] session key (index member)
-- ARGV[7] key id the elements and metadata values are sealed with ('' = cleartext)
-- ARGV[8] max metadata bytes (0 = no limit)
-- ARGV[9] the turn's value the write is made through ('' = none: not fenced)
-- ARGV[10] the newest message expected ('' = none, '.' = the session is empty, else the
--   newest element's prefix '{"id":"<id>",')
-- ARGV[11] the store's usage budget in tokens (0 = none; the meta field 'ub', the session's
--   own, comes first)
-- ARGV[12] the store's cap on the tokens a session holds (0 = none; see Token sums below)
-- ARGV[13] m = number of metadata arguments that follow (field/value pairs: 'm:' .. name,
--   value or 'e:' .. name, sealed value), ARGV[14 .. 13+m]
-- ARGV[14+m ..] message pairs: tag (8-byte id digest, then the message's token count, then
--   '/' and its usage 'input:output:requests' or nothing), stored element (JSON, or id
--   prefix + sealed)
-- Reply: {OK, number appended, number trimmed from the head} | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k, dk} | {WRONG_TYPE, i, type}
--        | {TREE_CHANGED, ...} | {DAMAGED, ...} | {TOO_LARGE, bytes, limit} | {VERSION, ...}
--        | {TURN_LOST} | {STALE, the newest message's id} | {OVER_BUDGET, usage, budget}
-- Events: none.
-- A message whose id digest is in the session's id window is skipped, so a call retried after
-- a lost reply stores nothing twice and still answers OK (before the turn and the expectation
-- are looked at: a retry of an applied write succeeds, as is the budget); when every message is skipped the
-- metadata is not set either, so a retry cannot undo a later writer's entries. Every key's
-- type is checked by the first command on it (redis.pcall), and nothing is written before every
-- check passed; the first write (ZADD) is one that Redis refuses when it is out of memory.
-- The hot path (one message, no metadata, a window that need not turn over) uses locals only:
-- inside a script each Redis call and each Lua table or string built costs server time, so
-- fields are read only where needed (tg only when the deadline moves). The usage of the new
-- messages is added to the session's (meta fields ui, uo, ur), which the budget is held to.
-- Token sums (see the prelude): the new messages' counts are added to the session's sums (most
-- often one field of its ids hash, written in the same HSET as the window); the oldest messages
-- are trimmed until the session holds at most ARGV[5] messages and, where its sums are known,
-- at most ARGV[12] tokens (the newest always stays).
-- The common append first: one message without usage, no metadata, fence, expectation or
-- budget, to a session whose list is as its meta hash says, whose window need not turn over and
-- that is not trimmed by it. Only the few prelude parts this block uses are built before it
-- (see the mark below); it writes what the full path below writes for such an append and
-- answers as it would. Anything else, and any read that does not answer as expected, goes on to
-- the full path before any write, which reads again and answers (a refusal too).
if ARGV[13] == '0' and #ARGV == 15 and ARGV[9] == '' and ARGV[10] == '' and ARGV[11] == '0'
  and not string.find(ARGV[14], '/', 9, true) then
  local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'h', 'n', 'ub', 'g')
  local t = redis.call('TIME')
  local now, ttl = t[1] * 1000 + math.floor(t[2] / 1000), tonumber(ARGV[1])
  local h, n = whole(f[4]), whole(f[5])
  local len = (not f.err and f[1] == SCHEMA and (f[2] or '') == ARGV[7] and (f[6] or '0') == '0'
    and f[5] and h and n and n > h and not (ttl > 0 and now + ttl > tonumber(f[3] or '0')))
    and redis.pcall('LLEN', KEYS[2])
  local max = tonumber(ARGV[5])
  if len == n - h and not (max > 0 and n + 1 - h > max) then
    local tag = ARGV[14]
    local d = string.sub(tag, 1, 8)
    local bucket = string.char(128 + string.byte(d, 1) % 128)
    -- with the token sums' frame and the tail's field where their offset is 0 (see get.lua)
    local got = redis.pcall('HMGET', KEYS[3], 'w', bucket, 'sg', 'so', 'sb', sum_field(n - 1))
    local count = not got.err and tonumber(got[1])
    local old = got[2] or ''
    if count and held_in(old, d) then return {OK, 0, 0} end
    if count and count + 1 <= tonumber(ARGV[4]) then
      -- the token sums (see the prelude): known where their frame is this generation's and the
      -- tail's field ends at the tail; then the new entry, unless the cap or the limit is passed
      local to, B, T2, last = whole(got[4]), tonumber(got[5])
      local v = to and n - 1 + to
      if got[3] == (f[7] or '0') and v and B and B <= SUM_LIMIT and B >= -SUM_LIMIT then
        last = got[6]
        if to ~= 0 then last = redis.call('HGET', KEYS[3], sum_field(v)) end
        local off = v % SUM_SPAN
        if last and #last == (off + 1) * 16 then
          local T = tonumber(string.sub(last, off * 16 + 1))
          T2 = T and T + (tonumber(string.sub(tag, 9)) or 0)
        end
      end
      local cap = tonumber(ARGV[12])
      if not (T2 and (T2 > SUM_LIMIT or cap > 0 and T2 - B > cap)) then
        local z = redis.pcall('ZADD', KEYS[4], now, ARGV[6])
        if type(z) ~= 'table' then  -- a refusal (out of memory) is the full path's to answer
          redis.call('RPUSH', KEYS[2], ARGV[15])
          local c = count_of(old) + 1
          local entry = string.char(math.floor(c / 65536), math.floor(c / 256) % 256, c % 256)
            .. d .. string.sub(old, 4)
          if T2 then
            local w = n + to
            redis.call('HSET', KEYS[3], 'w', count + 1, bucket, entry,
              sum_field(w),
              (w % SUM_SPAN > 0 and last or '') .. string.format('%16d', T2))
          else
            redis.call('HSET', KEYS[3], 'w', count + 1, bucket, entry)
          end
          redis.call('HSET', KEYS[1], 'updated_at', t[1] .. string.format('%06d', t[2]), 'n', n + 1)
          return {OK, 1, 0}
        end
      end
    end
  end
end
-- (the prelude's other parts)
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'h', 'n', 'ub', 'g')
if failed(f) then return refusal(f, 1) end
if not f[1] then return gone(1, 2, 3, 5) end
if f[1] ~= SCHEMA then return {DAMAGED, 1, 'version', f[1]} end
if (f[2] or '') ~= ARGV[7] then return key_changed(f[2]) end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[1])
local extend_now = ttl > 0 and now + ttl > tonumber(f[3] or '0')
if extend_now then
  local tg = redis.call('HGET', KEYS[1], 'tg') or '0'
  if tg ~= ARGV[3] then return tree_changed(tg) end
end
local g, h, n = positions(nil, f[4], f[5], 2, 1)
if g == nil then return h end
local m = tonumber(ARGV[13])
local size = tonumber(ARGV[4])
local sums_at  -- the token sums' frame fields sg, so, sb as read (nil: not read)

local quick, d, bucket, w, old, count = m == 0 and #ARGV == 15 and f[5] and true
local spent, tokens  -- the new messages' usage tags and token counts
if quick then  -- one message: its bucket, the window's state and the sums' frame, in one HMGET
  local tag = ARGV[14]
  local t, u = tag_parts(tag)
  d, tokens = string.sub(tag, 1, 8), {t}
  if u then spent = {u} end
  bucket = string.char(128 + string.byte(d, 1) % 128)
  local got
  got = redis.pcall('HMGET', KEYS[3], 'w', bucket, 'sg', 'so', 'sb')
  if failed(got) then return refusal(got, 3) end
  w, old = got[1], got[2] or ''
  sums_at = {got[3], got[4], got[5]}
  if not w then return {DAMAGED, 3, 'missing'} end
  count = tonumber(w)
  if held_in(old, d) then return {OK, 0, 0} end
  quick = count + 1 <= size
end
local win, digests, elements, mb
if not quick then
  local stop
  win, stop = open_window(3, f[5], 14 + m, #ARGV, 2)
  if not win then return stop end
  digests, elements, spent, tokens = {}, {}, {}, {}
  for i = 14 + m, #ARGV, 2 do
    local tag = ARGV[i]
    local digest = string.sub(tag, 1, 8)
    if not has(win, digest) then
      digests[#digests + 1] = digest
      elements[#elements + 1] = ARGV[i + 1]
      local t, u = tag_parts(tag)
      tokens[#tokens + 1] = t
      if u then spent[#spent + 1] = u end
    end
  end
  if #digests == 0 then return {OK, 0, 0} end
  if m > 0 then
    mb = metadata_after(KEYS[1], redis.call('HGET', KEYS[1], 'mb'), 14, 13 + m, 1, 0)
    local limit = tonumber(ARGV[8])
    if limit > 0 and mb > limit then return {TOO_LARGE, mb, limit} end
    local older = version_refused(KEYS[1], 14, 13 + m)
    if older then return older end
  end
end
local refused = fence_refused(8, ARGV[9]) or expect_refused(2, n, h, 0, ARGV[10])
if refused then return refused end
local paid = spent and #spent > 0
local u, totals  -- the session's and the prefix's usage figures, read where they are used
if paid or (f[6] or ARGV[11]) ~= '0' then
  u = redis.call('HMGET', KEYS[1], 'ui', 'uo', 'ur')
  refused = usage_damaged(1, {u[1], u[2], u[3], f[6]}) or budget_refused(u[1], u[2], f[6], ARGV[11])
  if refused then return refused end
  if paid then
    totals, refused = read_totals(9)
    if refused then return refused end
  end
end
local fr  -- the token sums' frame (nil: unknown)
if g == false then
  if not sums_at then sums_at = redis.call('HMGET', KEYS[3], 'sg', 'so', 'sb') end
  if sums_at[1] then fr = sums_frame(3, sums_at[1], sums_at[2], sums_at[3], f[7] or '0', h, n) end
end
local added = #tokens
local n2 = n + added
local h2 = h  -- the head after the trims: by count (ARGV[5]), by tokens (ARGV[12])
local max = tonumber(ARGV[5])
if max > 0 and n2 - h > max then h2 = n2 - max end
local S  -- the token sums' tools, where the trim by tokens built them
fr, h2, S = sums_trim(3, fr, h, n, tokens, tonumber(ARGV[12]), h2)

local z = redis.pcall('ZADD', KEYS[4], now, ARGV[6])
if failed(z) then return refusal(z, 4) end
local created = n == h  -- the list is made anew: it joins the tree's deadline
local sums, base = sums_write(3, fr, h, n, tokens, h2, S)
if quick then
  redis.call('RPUSH', KEYS[2], ARGV[15])
  local c = count_of(old) + 1
  redis.call('HSET', KEYS[3], 'w', count + 1, bucket,
    string.char(math.floor(c / 65536), math.floor(c / 256) % 256, c % 256) .. d .. string.sub(old, 4),
    unpack(sums or {}))
else
  push_all(KEYS[2], elements)
  add(win, digests, size)
  sums_into(win, sums)
  save_window(win)
end
n = n2
local us = t[1] .. string.format('%06d', t[2])
local trimmed = h2 - h
if trimmed > 0 then
  redis.call('LTRIM', KEYS[2], trimmed, -1)
  h = h2
end
if g then  -- the positions begin anew (the list was changed behind the store's back)
  redis.call('HSET', KEYS[1], 'updated_at', us, 'n', n, 'h', h, 'g', g)
elseif trimmed > 0 then
  redis.call('HSET', KEYS[1], 'updated_at', us, 'n', n, 'h', h)
else
  redis.call('HSET', KEYS[1], 'updated_at', us, 'n', n)
end
sums_base(3, fr, sums, base)
if mb then
  redis.call('HSET', KEYS[1], 'mb', mb)
  hcall_from('HSET', KEYS[1], 14, 13 + m)
end
if paid then
  local add = spent_usage(spent)
  set_figures(1, u, add)
  set_figures(9, totals, add)
end
if extend_now then
  extend(10, ttl, tonumber(ARGV[2]), now)
elseif created then
  join_tree(f[3], {2})
end
return {OK, added, trimmed}
