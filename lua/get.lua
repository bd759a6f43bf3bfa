-- get: read a session (or only its list positions) and its messages in one snapshot; with the
-- version of what the caller holds already, only the messages added since. Read-only: it runs
-- on a read-only replica and when Redis is out of memory.
-- KEYS: meta msgs ids mark
-- ARGV: last with_meta token generation tail budget held_head max_tokens with_context
-- OK: meta from_ head tail generation token elements upto kid dk first context_tokens
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] expiry marker
-- ARGV[1] the newest N messages wanted (-1 = all)   ARGV[2] '1': the meta hash too
-- ARGV[3] the session token, ARGV[4] generation and ARGV[5] tail position the caller holds
--         messages up to ('' = none)   ARGV[6] bytes to read at most (the rest: read_range)
-- ARGV[7] the position of the first message the caller holds ('' with ARGV[5] '')
-- ARGV[8] the most tokens the wanted messages may sum to ('' = no bound): the newest messages
--   whose counts sum to at most it (with ARGV[1], the fewer), found by the token sums (see the
--   prelude) in about 2 log2(wanted) entries read, however long the list
-- ARGV[9] '1': the tokens the session holds too (its token sums' tail read)
-- Reply: {OK, meta as a flat field/value array (or {}), from, h, n, g, token, elements, upto,
--        k, dk, first, context} (k, dk: the session's key id and wrapped data key, '' when
--        cleartext; first: where the wanted messages begin; context: the tokens the session
--        holds, false when its token sums are unknown): the elements are the messages at
--        positions from .. upto - 1
--        (absolute, in generation g; the list holds h .. n - 1); upto < n when the byte
--        budget ran out | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i, type} | {DAMAGED, ...}
--        | {TOKENS_UNKNOWN} (ARGV[8] given, the session's token sums unknown)
-- Events: none. Positions: see the prelude. When the caller's token and generation match, its
-- tail position lies in h .. n and what it holds begins at or before the first wanted message,
-- from is that tail position (only the new messages travel); else from is where the wanted
-- messages begin.
local want_meta = ARGV[2] == '1'
local with_sums = ARGV[9] == '1' or ARGV[8] ~= ''  -- their read checks the ids hash's type
if not with_sums then
  local t = redis.call('TYPE', KEYS[3])['ok']
  if t ~= 'none' and t ~= 'hash' then return {WRONG_TYPE, 3, t} end
end
local meta
if want_meta then
  meta = redis.pcall('HGETALL', KEYS[1])
  if failed(meta) then return refusal(meta, 1) end
  if #meta == 0 then return gone(1, 2, 3, 4) end
end
local f = redis.pcall('HMGET', KEYS[1], 'v', 'token', 'g', 'h', 'n', 'k', 'dk')
if failed(f) then return refusal(f, 1) end
if not f[1] then return gone(1, 2, 3, 4) end  -- a hash without 'v': {DAMAGED, 1, 'foreign'}
if f[1] ~= SCHEMA then return {DAMAGED, 1, 'version', f[1]} end
local g, h, n = positions(f[3], f[4], f[5], 2)
if not g then return h end
local want = tonumber(ARGV[1])
local first = h
if want >= 0 then first = math.max(h, n - want) end
local fr
if with_sums then
  -- the frame's fields and, in the same call, the tail's field where the offset is 0 (most
  -- lists': a pop, a rewind, a compaction or a fork moves it); sums_frame reads it otherwise
  local s = redis.pcall('HMGET', KEYS[3], 'sg', 'so', 'sb', sum_field(n - 1))
  if failed(s) then return refusal(s, 3) end
  local last
  if s[2] == '0' then last = s[4] end
  fr = sums_frame(3, s[1], s[2], s[3], g, h, n, last)
end
if ARGV[8] ~= '' then
  if not fr then return {TOKENS_UNKNOWN} end
  local S = sums_tools()
  local p = S.from_tail(S.before(fr, h, n, {}, S.reader(3)), first, n, fr[3] - tonumber(ARGV[8]))
  if not p then return {TOKENS_UNKNOWN} end
  first = p
end
local from = first
local token = f[2] or ''
if token ~= '' and ARGV[3] == token and ARGV[4] == tostring(g) and ARGV[5] ~= '' then
  local held = tonumber(ARGV[5])
  if held >= h and held <= n and tonumber(ARGV[7]) <= first then from = math.max(first, held) end
end
local elements, upto = read_from(2, h, from, n, tonumber(ARGV[6]))
return {OK, meta or {}, from, h, n, g, token, elements, upto, f[6] or '', f[7] or '', first,
  fr and fr[3] - fr[2]}
