-- append_message: append messages, skip ids already appended, trim, keep the tree alive;
-- set metadata entries along with them when at least one message is new.
-- KEYS[1..7] the tree's root keys (see the prelude); KEYS[8 ..] the tree's members
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] max messages (0 = all)   ARGV[6] session key (index member)
-- ARGV[7] key id the elements and metadata values are sealed with ('' = cleartext)
-- ARGV[8] max metadata bytes (0 = no limit)
-- ARGV[9] m = number of metadata arguments that follow (field/value pairs: 'm:' .. name,
--   value or 'e:' .. name, sealed value), ARGV[10 .. 9+m]
-- ARGV[10+m ..] message pairs: 8-byte id digest, stored element (JSON, or id prefix + sealed)
-- Reply: {OK, number appended} | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k} | {WRONG_TYPE, i}
--        | {TREE_CHANGED, ...} | {DAMAGED, ...} | {TOO_LARGE, bytes, limit}
-- Events: none.
-- A message whose id digest is in the session's id window is skipped, so a call retried after
-- a lost reply stores nothing twice and still answers OK; when every message is skipped the
-- metadata is not set either, so a retry cannot undo a later writer's entries. Every key's
-- type is checked by the first command on it (redis.pcall), and nothing is written before every
-- check passed; the first write (ZADD) is one that Redis refuses when it is out of memory.
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k', 'x', 'tg', 'g', 'h', 'n', 'i', 'mb')
local refused = root_refused(f)
if refused then return refused end
if (f[2] or '') ~= ARGV[7] then return {KEY_CHANGED, f[2] or ''} end
local us, now = clock()
local ttl = tonumber(ARGV[1])
local extend_now = due(f[3], ttl, now)
if extend_now and (f[4] or '0') ~= ARGV[3] then return tree_changed(f[4]) end
local g, h, n = positions(f[5], f[6], f[7], 2)
if not g then return h end

local m = tonumber(ARGV[9])
local win, stop = open_window(3, f[8], 10 + m, #ARGV, 2)
if not win then return stop end
local digests, elements = {}, {}
for i = 10 + m, #ARGV, 2 do
  local d = ARGV[i]
  if not has(win, d) then
    digests[#digests + 1] = d
    elements[#elements + 1] = ARGV[i + 1]
    win.added[d] = true
  end
end
if #digests == 0 then return {OK, 0} end
local mb = f[9]
if m > 0 then
  local total = metadata_after(KEYS[1], mb, 10, 9 + m, 1, 0)
  local limit = tonumber(ARGV[8])
  if limit > 0 and total > limit then return {TOO_LARGE, total, limit} end
  mb = total
end

local z = redis.pcall('ZADD', KEYS[4], now, ARGV[6])
if failed(z) then return refusal(z, 4) end
local created = n == h  -- the list is made anew: it joins the tree's deadline
push_all(KEYS[2], elements)
n = n + #elements
local max = tonumber(ARGV[5])
if max > 0 and n - h > max then
  redis.call('LTRIM', KEYS[2], -max, -1)
  h = n - max
end
win.added = {}
add(win, digests, tonumber(ARGV[4]))
save_window(win)
local fields = {'updated_at', us, 'g', g, 'h', h, 'n', n, 'i', '1', 'mb', mb or ''}
if not mb then fields[11], fields[12] = nil, nil end  -- a first-layout session counts it later
redis.call('HSET', KEYS[1], unpack(fields))
if m > 0 then hcall_from('HSET', KEYS[1], 10, 9 + m) end
if extend_now then
  extend(8, ttl, tonumber(ARGV[2]), now)
elseif created then
  join_tree(f[3], {2})
end
return {OK, #digests}
