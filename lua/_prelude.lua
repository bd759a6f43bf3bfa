-- Shared prelude: redis_session/scripts.py puts the parts of this file that a script uses in
-- front of it (each blank-line separated block: one definition with its comment).
-- Lua 5.1, portable between Redis >= 7, Valkey and fakeredis: no globals, no table.unpack,
-- no cmsgpack/bit/struct, numbers that matter travel as strings.
--
-- Status codes (the first element of every reply; redis_session/status.py maps them):
--   0 OK, 1 NOT_FOUND, 2 EXPIRED, 3 EXISTS, 4 OUT_OF_RANGE, 5 STALE, 6 MERGED,
--   7 CONFLICT, 8 MISSING, 9 WRONG_TYPE (reply {9, i, type}: KEYS[i] holds a value of that
--     Redis type, which this store did not write there),
--   10 PARENT_GONE (reply {10, NOT_FOUND or EXPIRED}: a child's parent session is gone)
--   11 KEY_CHANGED (reply {11, k}: the session is sealed with key id k, '' = cleartext)
--   12 TREE_CHANGED (reply {12, tg, child key...}: the tree's members are not the caller's)
--   13 DAMAGED (reply {13, i, what, found, expected}: KEYS[i] is missing or inconsistent;
--      {13, i, 'version', v}: KEYS[i] is a session of schema version v, not this store's)
--   14 TOO_LARGE (reply {14, bytes, limit}: the session's metadata would exceed its limit)
--   15 PRUNED (reply {15, merged_at_us}: the child was merged and its record pruned since)
--   16 STAGE (reply {16, n}: too large for one script call: the caller does it in steps)
--   17 VERSION (reply {17, field, version}: a sealed metadata value no newer than the stored one)
--   18 TURN_LOST (a write through a turn whose lease ran out, or that a later claim took over)
--   19 TURN_BUSY (reply {19, pttl}: another holder has the session's turn for pttl ms more)
--   20 OVER_BUDGET (reply {20, usage, budget}: the session's usage has reached its budget)
--   21 TOKENS_UNKNOWN (a read by tokens of a list whose token sums are unknown)
--
-- Every script that writes to a session tree takes the tree's root keys first:
--   KEYS[1] root meta hash   KEYS[2] root msgs list   KEYS[3] root ids hash
--   KEYS[4] index zset       KEYS[5] expiry marker    KEYS[6] kids zset   KEYS[7] done zset
-- and ARGV[1] ttl ms (0 = none), ARGV[2] expiry-marker grace ms, ARGV[3] the tree generation
-- the caller knows, ARGV[4] the id window (digests a session keeps at least).
-- The tree's members (the children in KEYS[6], three keys each: meta, msgs, ids, as the
-- caller knows them) come last, from a position each script names.
local OK, NOT_FOUND, EXPIRED, EXISTS, OUT_OF_RANGE, STALE, MERGED, CONFLICT, MISSING, WRONG_TYPE,
  PARENT_GONE, KEY_CHANGED, TREE_CHANGED, DAMAGED, TOO_LARGE, PRUNED, STAGE, VERSION, TURN_LOST,
  TURN_BUSY, OVER_BUDGET,
  TOKENS_UNKNOWN = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21

-- Writers seal what they add with the session's own data key, whose id is the meta field 'k'
-- ('' or absent: cleartext). The reply that tells a writer whose key id k is not the
-- session's: {KEY_CHANGED, k, the session's wrapped data key (meta field dk, or '')}.
local function key_changed(k)
  return {KEY_CHANGED, k or '', redis.call('HGET', KEYS[1], 'dk') or ''}
end

-- Sealed metadata values of this layout carry a version (bytes 2-9, after the byte 3): a write
-- may not give a field a version no newer than the stored one, so that a reader that saw a
-- value can tell an older one put back. Checks the pairs ARGV[first .. last]; the reply that
-- stops the write ({VERSION, field, stored version}), or nil.
local function version_refused(meta, first, last)
  for i = first, last, 2 do
    local v = ARGV[i + 1]
    if string.byte(v, 1) == 3 then
      local old = redis.call('HGET', meta, ARGV[i])
      if old and string.byte(old, 1) == 3 and string.sub(v, 2, 9) <= string.sub(old, 2, 9) then
        return {VERSION, ARGV[i], string.sub(old, 2, 9)}
      end
    end
  end
  return nil
end

-- Server clock: microseconds since the epoch as a decimal string, and milliseconds as a number.
local function clock()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', t[2]), t[1] * 1000 + math.floor(t[2] / 1000)
end

-- The reply {WRONG_TYPE, i, type} for the first KEYS[i] whose type is neither 'none' nor
-- types[i], or nil.
local function wrong_type(types)
  for i, want in ipairs(types) do
    local got = redis.call('TYPE', KEYS[i])['ok']
    if got ~= 'none' and got ~= want then return {WRONG_TYPE, i, got} end
  end
  return nil
end

-- types (for wrong_type) with the types of the children's keys from KEYS[first] on, four per
-- child as a delete passes them: meta hash, msgs list, ids hash, staging list.
local function with_children(types, first)
  for i = first, #KEYS, 4 do
    types[i], types[i + 1], types[i + 2], types[i + 3] = 'hash', 'list', 'hash', 'list'
  end
  return types
end

-- A redis.pcall reply that is an error rather than a value.
local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- What a script answers for a failed redis.pcall on KEYS[i]: {WRONG_TYPE, i, type} when the key
-- holds another type; any other error (OOM, READONLY, ...) is returned to the caller as it is.
local function refusal(reply, i)
  if string.sub(tostring(reply.err), 1, 9) == 'WRONGTYPE' then
    return {WRONG_TYPE, i, redis.call('TYPE', KEYS[i])['ok']}
  end
  return reply
end

-- Why a session's meta hash KEYS[m] holds no session: {DAMAGED, m, 'foreign'} when it holds a
-- hash without a schema version (not written by this store); {DAMAGED, m, 'missing'} when its
-- list KEYS[l] or its id window KEYS[i] is still there (the hash was evicted or removed by
-- hand: a session's data keys expire at one moment, so expiry leaves none of them);
-- {EXPIRED} while its expiry marker KEYS[x] is left, unless the marker says the tree's
-- deadline has not come yet: then the keys were evicted ({DAMAGED, m, 'evicted'}); else
-- {NOT_FOUND}.
local function gone(m, l, i, x)
  if redis.call('EXISTS', KEYS[m]) == 1 then return {DAMAGED, m, 'foreign'} end
  if redis.call('EXISTS', KEYS[l]) == 1 then return {DAMAGED, m, 'missing'} end
  if redis.call('EXISTS', KEYS[i]) == 1 then return {DAMAGED, m, 'missing'} end
  local mark = redis.call('GET', KEYS[x])
  if mark then
    local t = redis.call('TIME')
    if tonumber(mark) > t[1] * 1000 + math.floor(t[2] / 1000) then return {DAMAGED, m, 'evicted'} end
    return {EXPIRED}
  end
  return {NOT_FOUND}
end

-- The schema version of the meta hashes this store writes (field 'v'; create's ARGV names it).
local SCHEMA = '1'

-- Whether the root's meta hash (fields read in f, the schema version first) is a live session
-- of this schema: nil when it is, else the reply that stops the write ({WRONG_TYPE, 1, type},
-- {EXPIRED}, {NOT_FOUND}, {DAMAGED, 1, 'version', v} for another schema version, ...).
local function root_refused(f)
  if failed(f) then return refusal(f, 1) end
  if not f[1] then return gone(1, 2, 3, 5) end
  if f[1] ~= SCHEMA then return {DAMAGED, 1, 'version', f[1]} end
  return nil
end

-- A list position field's value (a string, or false: missing, which reads as 0) as a number,
-- or nil unless it is a whole number from 0 to 2^53 - 1 (Lua's numbers are exact up to it):
-- a store writes no other.
local function whole(v)
  local x = tonumber(v or '0')
  if x and x >= 0 and x <= 9007199254740991 and x % 1 == 0 then return x end
  return nil
end

-- List positions of a session or child (meta fields g, h, n): generation, absolute head and
-- tail (LLEN == n - h). Returns g, h, n, or nil and the DAMAGED reply when the list KEYS[l] is
-- missing though the session records messages (evicted), or when the meta hash KEYS[l - 1]
-- holds positions a store does not write (not whole numbers, a tail before the head:
-- {DAMAGED, l - 1, 'positions'}). A list of another length was changed
-- behind the store's back (another writer): its positions begin a new generation, which a
-- writer records. g = nil with m: the caller did not read g (the hot path); false is returned
-- for it unless the positions begin anew, when it is read from the meta hash KEYS[m]. (A field
-- HMGET found missing is false, not nil: it reads as 0, as a missing h or n does.)
local function positions(g, h, n, l, m)
  local len = redis.pcall('LLEN', KEYS[l])
  if failed(len) then return nil, refusal(len, l) end
  if g ~= nil then g = whole(g) end
  h, n = whole(h), whole(n)
  if g == nil and m == nil or not h or not n or n < h then
    return nil, {DAMAGED, l - 1, 'positions'}
  end
  if len == n - h then
    if m ~= nil then return false, h, n end
    return g, h, n
  end
  if len == 0 then return nil, {DAMAGED, l, 'length', 0, n - h} end
  if m ~= nil then
    g = whole(redis.call('HGET', KEYS[m], 'g'))
    if not g then return nil, {DAMAGED, l - 1, 'positions'} end
  end
  return g + 1, 0, len
end

-- The elements of list KEYS[l] at absolute positions from .. to - 1 (the list holds h ..),
-- read in steps of 500 and no more than about budget bytes (at least one element), so that no
-- read holds Redis long: returns them and the position after the last one read.
local function read_from(l, h, from, to, budget)
  local out, bytes, at = {}, 0, from
  while at < to and bytes < budget do
    local last = math.min(at + 500, to) - 1
    for _, e in ipairs(redis.call('LRANGE', KEYS[l], at - h, last - h)) do
      out[#out + 1] = e
      bytes = bytes + #e
      at = at + 1
      if bytes >= budget then break end
    end
  end
  return out, at
end

-- Whether a write at now (ms) must move the tree's deadline x (the root's meta field 'x').
local function due(x, ttl, now)
  return ttl > 0 and now + ttl > tonumber(x or '0')
end

-- The reply that tells the caller the tree's members: {TREE_CHANGED, tg, child key...}.
local function tree_changed(tg)
  local reply = {TREE_CHANGED, tg or '0'}
  for _, c in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do reply[#reply + 1] = c end
  return reply
end

-- Every key of the tree expires at its deadline x: the root's keys, KEYS[first ..] (the
-- members) and the expiry marker, which lives grace ms longer.
local function expire_tree(first, x, grace)
  redis.call('SET', KEYS[5], x, 'PXAT', x + grace)  -- the deadline: after it, "expired"
  for _, i in ipairs({1, 2, 3, 6, 7}) do redis.call('PEXPIREAT', KEYS[i], x) end
  for i = first, #KEYS do redis.call('PEXPIREAT', KEYS[i], x) end
end

-- Move the tree's deadline to now + ttl + ttl/16 (so that most writes need not touch any TTL)
-- and every key of the tree with it (see expire_tree). Returns the new deadline.
local function extend(first, ttl, grace, now)
  local x = now + ttl + math.floor(ttl / 16)
  redis.call('HSET', KEYS[1], 'x', x)
  expire_tree(first, x, grace)
  return x
end

-- Give the keys KEYS[i] for i in indexes the tree's deadline x (the root's meta field 'x'), so
-- that keys new to the tree expire with it; without a deadline they are made persistent (a
-- staged key loses its temporary TTL).
local function join_tree(x, indexes)
  for _, i in ipairs(indexes) do
    if x then redis.call('PEXPIREAT', KEYS[i], x) else redis.call('PERSIST', KEYS[i]) end
  end
end

-- HSET (or another variadic command) key with ARGV[first .. last], in chunks that stay under
-- Lua's unpack limit.
local function hcall_from(cmd, key, first, last)
  local chunk = {}
  for i = first, last do
    chunk[#chunk + 1] = ARGV[i]
    if #chunk == 1000 then
      redis.call(cmd, key, unpack(chunk))
      chunk = {}
    end
  end
  if #chunk > 0 then redis.call(cmd, key, unpack(chunk)) end
end

-- RPUSH the values of list (a Lua table) to key, in chunks under Lua's unpack limit.
local function push_all(key, list)
  for i = 1, #list, 1000 do redis.call('RPUSH', key, unpack(list, i, math.min(i + 999, #list))) end
end

-- The reply that stops a write made through a turn (fence: the turn's value, '' = none) whose
-- turn key KEYS[t] no longer holds it (the lease ran out, or a later claim took over), or nil.
local function fence_refused(t, fence)
  if fence == '' then return nil end
  local held = redis.pcall('GET', KEYS[t])
  if failed(held) then return refusal(held, t) end
  if held ~= fence then return {TURN_LOST} end
  return nil
end

-- The reply that stops a write whose caller expects the newest element of list KEYS[l] (which
-- holds n - h elements, each starting after skip bytes) to be one message: expect '' = no
-- expectation, '.' = the list is empty, else the element's prefix ('{"id":"<id>",'); or nil.
-- {STALE, the newest message's id ('' when the list is empty)}.
local function expect_refused(l, n, h, skip, expect)
  if expect == '' then return nil end
  local last = false
  if n > h then last = redis.call('LINDEX', KEYS[l], -1) end
  if expect == '.' then
    if not last then return nil end
  elseif last and string.sub(last, skip + 1, skip + #expect) == expect then
    return nil
  end
  return {STALE, last and string.match(string.sub(last, skip + 1), '^{"id":"([^"]*)"') or ''}
end

-- Usage (meta fields ui, uo, ur of a session's or a child's meta hash: the input tokens,
-- output tokens and requests of every message it was ever given). The reply that stops an
-- append to a session whose usage (ui + uo, as read) has reached its budget (ub: the
-- session's own, as read, else the store's, ARGV), or nil; a budget of 0 is none.
local function budget_refused(ui, uo, ub, default)
  local budget = tonumber(ub or default) or 0
  if budget <= 0 then return nil end
  local used = tonumber(ui or '0') + tonumber(uo or '0')
  if used >= budget then return {OVER_BUDGET, used, budget} end
  return nil
end

-- {DAMAGED, m, 'usage'} when one of values (usage fields as HMGET read them from KEYS[m]; false:
-- missing) is not a whole number a store writes (another writer's), else nil: checked before a
-- script's first write (set_figures adds to them).
local function usage_damaged(m, values)
  for _, v in ipairs(values) do
    if v and not whole(v) then return {DAMAGED, m, 'usage'} end
  end
  return nil
end

-- The usage totals of a prefix (KEYS[t]: a hash of ui, uo, ur beside the index shard, without
-- a TTL, as the event log), read before a script's first write: its figures (for set_figures),
-- or nil and the reply that stops the write ({WRONG_TYPE, t, type}: another type; {DAMAGED,
-- t, 'usage'}: figures that are not whole numbers).
local function read_totals(t)
  local got = redis.pcall('HMGET', KEYS[t], 'ui', 'uo', 'ur')
  if failed(got) then return nil, refusal(got, t) end
  local bad = usage_damaged(t, got)
  if bad then return nil, bad end
  return got
end

-- The usage of the tags in spent (a list of 'input:output:requests') as {input, output, requests}.
local function spent_usage(spent)
  local u = {0, 0, 0}
  for _, tag in ipairs(spent) do
    local a, b, c = string.match(tag, '^(%d+):(%d+):(%d+)$')
    if a then u[1], u[2], u[3] = u[1] + tonumber(a), u[2] + tonumber(b), u[3] + tonumber(c) end
  end
  return u
end

-- Set hash KEYS[m]'s usage figures to cur (as HMGET read them: ui, uo, ur; checked by
-- usage_damaged) plus u (a table {input, output, requests}), in one HSET.
local function set_figures(m, cur, u)
  redis.call('HSET', KEYS[m], 'ui', string.format('%.0f', tonumber(cur[1] or '0') + u[1]),
    'uo', string.format('%.0f', tonumber(cur[2] or '0') + u[2]),
    'ur', string.format('%.0f', tonumber(cur[3] or '0') + u[3]))
end

-- Lifecycle events. A script that makes a change logs its event in the same step: the tree's
-- event log stream KEYS[l] (one per prefix, or per slot on a cluster) and, live, pub/sub.
-- ARGV[e .. e+3] is the events group every such script takes: the channel, the publishing
-- command ('PUBLISH', 'SPUBLISH' or '' = none), the log's length limit (0 = no log) and its
-- age limit in ms (0 = none). The log's type is checked before the script's first write:
-- {WRONG_TYPE, l, type} when KEYS[l] is neither a stream nor absent, else nil.
local function log_refused(l)
  local t = redis.call('TYPE', KEYS[l])['ok']
  if t ~= 'none' and t ~= 'stream' then return {WRONG_TYPE, l, t} end
  return nil
end

-- Log and publish event type t, whose other fields are the JSON members fields (no braces,
-- from the caller), at time now (ms); returns its id in the log ('' with no log). An entry
-- holds t, the fields and p, the id of the entry before it ('0-0': the stream begins here),
-- so that a reader can tell a gap (entries trimmed or the stream lost) from no events. The
-- published JSON carries the id. The log keeps about its limit (XADD's MAXLEN ~ trims whole
-- blocks only, in O(1)) and nothing older than its age limit (XTRIM MINID ~). The log has no
-- TTL, so that volatile-* eviction never takes it: an event undoes the expiry that the delete
-- of a prefix's last session set (delete.lua).
local function log_event(l, e, t, fields, now)
  local id = ''
  local max, age = tonumber(ARGV[e + 2]), tonumber(ARGV[e + 3])
  if max > 0 then
    local last = redis.call('XREVRANGE', KEYS[l], '+', '-', 'COUNT', 1)[1]
    id = redis.call('XADD', KEYS[l], 'MAXLEN', '~', max, '*',
      't', t, 'p', last and last[1] or '0-0', 'e', fields)
    redis.call('PERSIST', KEYS[l])
    if age > 0 then redis.call('XTRIM', KEYS[l], 'MINID', '~', now - age) end
  end
  local publish = ARGV[e + 1]
  if publish ~= '' then
    local json = '{"type":"' .. t .. '","id":"' .. id .. '",' .. fields .. '}'
    if publish == 'SPUBLISH' then redis.call('SPUBLISH', ARGV[e], json)
    else redis.call('PUBLISH', ARGV[e], json) end
  end
  return id
end

-- Metadata size accounting (meta field 'mb': the bytes of every 'm:'/'e:' field name and value
-- as stored). The new total after setting ARGV[first .. last] (field/value pairs) and deleting
-- the fields ARGV[dfirst .. dlast], computed before anything is written.
local function metadata_after(meta, mb, first, last, dfirst, dlast)
  local total = tonumber(mb or '0')
  local size = {}
  for i = dfirst, dlast do size[ARGV[i]] = 0 end
  for i = first, last, 2 do size[ARGV[i]] = #ARGV[i] + #ARGV[i + 1] end
  for f, new in pairs(size) do
    local old = redis.call('HSTRLEN', meta, f)
    if old > 0 or redis.call('HEXISTS', meta, f) == 1 then old = old + #f end
    total = total + new - old
  end
  return total
end

-- The digest of a child message inherited from the parent at fork: never merged back.
local INHERITED = string.rep('\0', 8)

-- The id window of a session or child: the 8-byte digests of its newest message ids (and of
-- call tokens) in 128 buckets of its ids hash, named by one byte: 128 + the digest's first
-- byte % 128 (no clash with 'w'). A bucket holds two generations: a 3-byte count of its
-- current-generation digests, those digests (newest first), then the previous generation's.
-- Field 'w' is the current generation's digest count. When adding k digests would take the current generation past size, every bucket drops its previous
-- generation first (once per size appends) and a new one begins: the hash holds at most
-- 2 * size + k digests, and every one of the newest size is found. An append of one message
-- reads and writes one bucket.
local function bucket_of(d)
  return string.char(128 + string.byte(d, 1) % 128)
end

local function count_of(bucket)
  if #bucket < 3 then return 0 end
  local a, b, c = string.byte(bucket, 1, 3)
  return (a * 256 + b) * 256 + c
end

-- Whether a window bucket holds digest d (at a digest's place: after the count, 8 bytes each).
local function held_in(bucket, d)
  if not bucket or #bucket < 11 then return false end
  local pos = 4
  while true do
    local s = string.find(bucket, d, pos, true)
    if not s then return false end
    if (s - 4) % 8 == 0 then return true end
    pos = s + 1
  end
end

-- open_window reads the window's state and the buckets of digests ARGV[first],
-- ARGV[first + step] ... ARGV[last] and of the digests in extra (a list) in one HMGET.
-- Returns the window (a table: bucket values by field name, key, count, dirty), or nil and
-- the reply that
-- stops the script: the ids hash KEYS[i] holds a foreign type, or is missing though expected
-- (the session records list positions: its window exists).
local function open_window(i, expected, first, last, step, extra)
  local fields
  if first == last and not extra then  -- one digest (the common append): no bookkeeping
    fields = {'w', bucket_of(ARGV[first])}
  else
    local seen = {}
    fields = {'w'}
    local function want(d)
      local b = bucket_of(d)
      if not seen[b] then
        seen[b] = true
        fields[#fields + 1] = b
      end
    end
    for j = first, last, step do want(ARGV[j]) end
    if extra then for _, d in ipairs(extra) do want(d) end end
  end
  local got = redis.pcall('HMGET', KEYS[i], unpack(fields))
  if failed(got) then return nil, refusal(got, i) end
  if not got[1] and expected then return nil, {DAMAGED, i, 'missing'} end
  local win = {key = i, count = tonumber(got[1] or '0'), dirty = {}}
  for n = 2, #fields do win[fields[n]] = got[n] or '' end
  return win
end

-- Read into the window the buckets of digests (a list) it has not read yet, in one HMGET: a
-- bucket is always read before it is looked in or rewritten (rewriting one not read would drop
-- the digests it held).
local function load_buckets(win, digests)
  local fields, seen = {}, {}
  for _, d in ipairs(digests) do
    local b = bucket_of(d)
    if win[b] == nil and not seen[b] then
      seen[b] = true
      fields[#fields + 1] = b
    end
  end
  if #fields == 0 then return end
  local got = redis.call('HMGET', KEYS[win.key], unpack(fields))
  for n, b in ipairs(fields) do win[b] = got[n] or '' end
end

-- Whether the window holds digest d (its bucket read first if it was not).
local function has(win, d)
  local b = bucket_of(d)
  if win[b] == nil then load_buckets(win, {d}) end
  return held_in(win[b], d)
end

-- Add digests (a list, none held) to the window, turning it over first when the current
-- generation would pass size; written by save_window.
local function add(win, digests, size)
  if #digests == 0 then return end
  if win.count > 0 and win.count + #digests > size then
    local all = {}
    for n = 1, 128 do all[n] = string.char(127 + n) end
    local values = redis.call('HMGET', KEYS[win.key], unpack(all))
    for n, f in ipairs(all) do  -- the current generation becomes the previous one
      local v = values[n] or ''
      win[f] = '\0\0\0' .. string.sub(v, 4, 3 + 8 * count_of(v))
      win.dirty[f] = true
    end
    win.count = 0
  end
  load_buckets(win, digests)  -- none left to read after a turn-over (it read them all)
  local groups = {}
  for _, d in ipairs(digests) do
    local f = bucket_of(d)
    local g = groups[f]
    if g then g[#g + 1] = d else groups[f] = {d} end
  end
  for f, list in pairs(groups) do  -- each bucket rebuilt once, however many digests it gets
    local v = win[f] or ''
    local c = count_of(v) + #list
    win[f] = string.char(math.floor(c / 65536), math.floor(c / 256) % 256, c % 256)
      .. table.concat(list) .. string.sub(v, 4)
    win.dirty[f] = true
  end
  win.count = win.count + #digests
end

-- Write the window's changed buckets and its state in one HSET.
local function save_window(win)
  local args = {'w', win.count}
  for f in pairs(win.dirty) do
    args[#args + 1] = f
    args[#args + 1] = win[f]
  end
  for i = 1, #args, 1000 do redis.call('HSET', KEYS[win.key], unpack(args, i, math.min(i + 999, #args))) end
  win.dirty = {}
end

-- Whether a child's hash (fields parent, merged_at in f) is a live child of parent: OK,
-- MERGED, or the reply for a child that is not there: {PRUNED, merged_at} when the root's done
-- zset KEYS[7] remembers its merge, else {NOT_FOUND}.
local function child_state(f, parent, child_key)
  if not f[1] then
    local at = redis.call('ZSCORE', KEYS[7], 'm' .. child_key)
    if at then return {PRUNED, at} end
    return {NOT_FOUND}
  end
  if f[1] ~= parent then return {NOT_FOUND} end
  if f[2] then return MERGED end
  return OK
end

-- Whether another call holds the child's merge lease (meta fields mt: its token, mx: until when,
-- ms): a staged merge is under way, and the child takes no messages and no other merge.
local function leased(mt, mx, now, token)
  return mt and mt ~= token and tonumber(mx or '0') >= now or false
end

-- Remember an ended child in the root's done zset (newest 100 kept): 'm' .. key for a merged
-- one, 'd' .. key for a discarded one, scored by when it ended (us).
local function tombstone(kind, child_key, us)
  redis.call('ZADD', KEYS[7], us, kind .. child_key)
  redis.call('ZREMRANGEBYRANK', KEYS[7], 0, -101)
end

-- Token sums. Beside a list (a session's or a child's), its ids hash KEYS[i] keeps the running
-- sums of its messages' token counts (a tag's: tag_parts): entry v holds S(v), the counts of
-- every message through the one at list position v - to, as 16 characters ('%16d'), SUM_SPAN
-- entries a field named 's' .. floor(v / SUM_SPAN). The same hash holds the frame (not the
-- meta hash, which every read returns whole): 'sg' the generation the sums hold for, 'so' the
-- offset to (so that entries stay where they are when the positions begin anew), 'sb' B, the
-- counts before the head (S(h - 1 + to) but after a compaction). The tail's field ends at the tail: its length tells that the sums are those of
-- the list as it is. The tokens the list holds: S(n - 1 + to) - B (0 when it is empty). A
-- script that does not keep the sums and changes the list changes its generation or its tail,
-- and so leaves them unknown (as a session stored before them has none): never wrong. An
-- append writes only its new entries (one field, most often), with no meta field. Sums stay
-- within SUM_LIMIT (exact in Lua's numbers), else they are dropped (unknown).
local SUM_SPAN, SUM_LIMIT = 16, 999999999999999

-- The name of the token-sums field that holds entry v.
local function sum_field(v)
  return string.format('s%d', math.floor(v / SUM_SPAN))
end

-- The token sums' frame of a list whose ids hash KEYS[i] has fields sg, so, sb as read (nil:
-- read here) and whose positions are g, h, n: {to, B, T (the counts through the tail), the tail
-- entry's field}, or nil when the sums are unknown. last: that field as read (nil: read here).
local function sums_frame(i, sg, so, sb, g, h, n, last)
  if sg == nil then sg, so, sb = unpack(redis.call('HMGET', KEYS[i], 'sg', 'so', 'sb')) end
  if not sg or sg ~= tostring(g) then return nil end
  local to, B = whole(so), tonumber(sb)
  if not to or not B or B > SUM_LIMIT or B < -SUM_LIMIT then return nil end
  local v = n - 1 + to
  if v < 0 then return {to, B, B, nil} end
  if last == nil then last = redis.call('HGET', KEYS[i], sum_field(v)) end
  local off = v % SUM_SPAN
  if not last or #last ~= (off + 1) * 16 then return nil end
  if n == h then return {to, B, B, last} end
  local T = tonumber(string.sub(last, off * 16 + 1))
  if not T then return nil end
  return {to, B, T, last}
end

-- A message tag's token count (the digits after its 8-byte id digest; none: 0) and its usage
-- ('input:output:requests' after a '/', or nil).
local function tag_parts(tag)
  local slash = string.find(tag, '/', 9, true)
  if not slash then return tonumber(string.sub(tag, 9)) or 0, nil end
  return tonumber(string.sub(tag, 9, slash - 1)) or 0, string.sub(tag, slash + 1)
end

-- The entries of messages counted tokens (a list) appended at the tail n of a list of frame fr:
-- the field/value pairs for the caller's HSET of its ids hash, and the new total T; nil when
-- past SUM_LIMIT.
local function sums_add(fr, n, tokens)
  local T, v = fr[3], n + fr[1]
  local out, parts = {}, {''}
  if v % SUM_SPAN > 0 then parts[1] = fr[4] end  -- the tail's field, continued
  for k = 1, #tokens do
    T = T + tokens[k]
    if T > SUM_LIMIT then return nil end
    parts[#parts + 1] = string.format('%16d', T)
    if v % SUM_SPAN == SUM_SPAN - 1 or k == #tokens then
      out[#out + 1], out[#out + 2] = sum_field(v), table.concat(parts)
      parts = {''}
    end
    v = v + 1
  end
  return out, T
end

-- The token sums' other tools, built when a script needs them (a closure each: every function
-- a script defines costs each of its calls, those of the append's hot path are above):
-- at(i, v) entry v of the ids hash KEYS[i] (nil: not there); reader(i) the same reading each
-- field once; drop(i, lo, hi) deletes fields lo .. hi - 1 (field numbers, none below 0);
-- cut(i, v) the field/value pair that ends the sums at entry v (nil: v's field ends there, or
-- v < 0), the fields past it the caller's to drop; before(fr, h, n, tokens, read) E(p), the
-- counts before position p (B at the head), of a list whose entries past n are those of
-- tokens (not written yet); from_tail(at, lo, hi, want) the first p in lo .. hi whose E(p) is
-- at least want, given E(hi) is, in about 2 log2(hi - p) entries read; head(i, fr, h, n,
-- tokens, cap) the head a cap of cap tokens leaves after an append of tokens (the newest
-- stays); append(i, fr, h, n, tokens, h2) the pairs of an append's entries then a trim to h2,
-- and the new B ('sb', nil: unchanged), false past SUM_LIMIT. Nil from any: an entry missing.
local function sums_tools()
  local S = {}
  function S.at(i, v)
    local chunk = redis.call('HGET', KEYS[i], sum_field(v))
    if not chunk then return nil end
    local at = (v % SUM_SPAN) * 16
    return tonumber(string.sub(chunk, at + 1, at + 16))
  end
  function S.reader(i)
    local seen = {}
    return function(v)
      local f = sum_field(v)
      local chunk = seen[f]
      if chunk == nil then
        chunk = redis.call('HGET', KEYS[i], f) or false
        seen[f] = chunk
      end
      if not chunk then return nil end
      local at = (v % SUM_SPAN) * 16
      return tonumber(string.sub(chunk, at + 1, at + 16))
    end
  end
  function S.drop(i, lo, hi)
    local fields = {}
    for c = math.max(lo, 0), hi - 1 do fields[#fields + 1] = 's' .. c end
    for j = 1, #fields, 1000 do
      redis.call('HDEL', KEYS[i], unpack(fields, j, math.min(j + 999, #fields)))
    end
  end
  function S.cut(i, v)
    if v < 0 or (v + 1) % SUM_SPAN == 0 then return nil end
    local f = sum_field(v)
    return {f, string.sub(redis.call('HGET', KEYS[i], f) or '', 1, (v % SUM_SPAN + 1) * 16)}
  end
  function S.before(fr, h, n, tokens, read)
    return function(p)
      if p == h then return fr[2] end
      if p <= n then return read(p - 1 + fr[1]) end
      local e = fr[3]
      for k = 1, p - n do e = e + tokens[k] end
      return e
    end
  end
  function S.from_tail(at, lo, hi, want)
    local good, bad, step = hi, lo - 1, 1
    while hi - step >= lo do
      local e = at(hi - step)
      if not e then return nil end
      if e < want then
        bad = hi - step
        break
      end
      good = hi - step
      step = step * 2
    end
    while good - bad > 1 do
      local mid = math.floor((bad + good) / 2)
      local e = at(mid)
      if not e then return nil end
      if e >= want then good = mid else bad = mid end
    end
    return good
  end
  function S.head(i, fr, h, n, tokens, cap)
    local added = 0
    for _, t in ipairs(tokens) do added = added + t end
    local n2 = n + #tokens
    local T2 = fr[3] + added
    if cap <= 0 or T2 - fr[2] <= cap or n2 == h then return h end
    local at = S.before(fr, h, n, tokens, S.reader(i))
    local want = T2 - cap
    -- an append under a cap mostly trims a few of the oldest: the head's field first
    local past = (math.floor((h + fr[1]) / SUM_SPAN) + 1) * SUM_SPAN - fr[1]
    for p = h + 1, math.min(past, n) do
      local e = at(p)
      if not e then return nil end
      if e >= want then return p end
    end
    local p = S.from_tail(at, h, n2, want)
    if not p then return nil end
    return math.min(p, n2 - 1)
  end
  function S.append(i, fr, h, n, tokens, h2)
    local put = sums_add(fr, n, tokens)
    if not put then return false end
    if h2 <= h then return put, nil end
    local to = fr[1]
    local B
    if h2 - 1 >= n then
      B = fr[3]
      for k = 1, h2 - n do B = B + tokens[k] end
    else
      B = S.at(i, h2 - 1 + to)
      if not B then return false end
    end
    local keep = math.floor((h2 - 1 + to) / SUM_SPAN)
    S.drop(i, math.floor((h - 1 + to) / SUM_SPAN), keep)
    local kept = {}
    for k = 1, #put, 2 do
      if tonumber(string.sub(put[k], 2)) >= keep then
        kept[#kept + 1], kept[#kept + 2] = put[k], put[k + 1]
      end
    end
    return kept, B
  end
  return S
end

-- The trim by tokens of an append of messages counted tokens to a list (ids hash KEYS[i], frame
-- fr, head h, tail n; h2: its head after the trim by count): fr (nil: an entry is missing, the
-- sums unknown from then on), the head raised until the list holds at most cap tokens (0: no
-- cap; the newest stays), and the sums' tools where it built them (else nil).
local function sums_trim(i, fr, h, n, tokens, cap, h2)
  if not fr or cap <= 0 then return fr, h2, nil end
  local T = fr[3]
  for k = 1, #tokens do T = T + tokens[k] end
  if T - fr[2] <= cap then return fr, h2, nil end
  local S = sums_tools()
  local p = S.head(i, fr, h, n, tokens, cap)
  if not p then return nil, h2, S end
  return fr, math.max(p, h2), S
end

-- The token sums through that append, then the trim to h2 (S: the tools, if built): the
-- field/value pairs for the ids hash KEYS[i] (false: none, the sums unknown or past SUM_LIMIT)
-- and the list's new B (nil: unchanged).
local function sums_write(i, fr, h, n, tokens, h2, S)
  if not fr then return false, nil end
  if h2 > h then return (S or sums_tools()).append(i, fr, h, n, tokens, h2) end
  return sums_add(fr, n, tokens) or false, nil
end

-- sums_write's pairs into the window win, written with its changed buckets by save_window.
local function sums_into(win, sums)
  for k = 1, #(sums or {}), 2 do
    win[sums[k]] = sums[k + 1]
    win.dirty[sums[k]] = true
  end
end

-- sums_write's base into the ids hash KEYS[i]; where the sums were known (fr) and none were
-- written, they are dropped (unknown from then on).
local function sums_base(i, fr, sums, base)
  if base then
    redis.call('HSET', KEYS[i], 'sb', base)
  elseif fr and not sums then
    redis.call('HDEL', KEYS[i], 'sg')
  end
end
