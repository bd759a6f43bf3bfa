-- reseal_session: replace some of a session's values by their re-sealed forms, each only if
-- it is still what the caller read: elements of one list by position, metadata values and
-- scalar fields of the session.
-- KEYS: session_meta owner_meta list
-- ARGV: kid generation #elements #fields
-- OK: replaced generation
-- KEYS[1] the session's meta hash   KEYS[2] the meta hash of the list's owner (the session's,
-- or a child's)   KEYS[3] the list
-- ARGV[1] the session's key id (set by rekey_session)   ARGV[2] the list's generation read
-- ARGV[3] n, then n triples: absolute position, old element, new element
-- then m, and m quads: old field, old value, new field, new value (KEYS[1]'s fields)
-- Reply: {OK, values replaced, the list's generation now} | {NOT_FOUND}
--        | {CONFLICT} (another key id, or the list began a new generation: read again)
-- Events: none. TTL and updated_at are left alone. An element no longer there, or changed,
-- is left alone. A list with replaced elements begins a new generation (readers holding it
-- read it again); the caller goes on with the generation returned.
local f = redis.call('HMGET', KEYS[1], 'v', 'k')
if not f[1] then return {NOT_FOUND} end
if f[2] ~= ARGV[1] then return {CONFLICT} end
local p = redis.call('HMGET', KEYS[2], 'g', 'h', 'n')
local g, h = positions(p[1], p[2], p[3], 3)
if not g then return h end
local n = tonumber(ARGV[3])
if n > 0 and tostring(g) ~= ARGV[2] then return {CONFLICT} end
local replaced = 0
for i = 4, 3 + 3 * n, 3 do
  local at = tonumber(ARGV[i]) - h
  if at >= 0 and redis.call('LINDEX', KEYS[3], at) == ARGV[i + 1] then
    redis.call('LSET', KEYS[3], at, ARGV[i + 2])
    replaced = replaced + 1
  end
end
if replaced > 0 then  -- the owner's hash records the new generation, unless it is gone
  g = g + 1            -- (evicted): none is made anew
  if p[3] or redis.call('EXISTS', KEYS[2]) == 1 then redis.call('HSET', KEYS[2], 'g', g) end
end
local at = 4 + 3 * n
local m = tonumber(ARGV[at])
for i = at + 1, at + 4 * m, 4 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    if ARGV[i] ~= ARGV[i + 2] then redis.call('HDEL', KEYS[1], ARGV[i]) end
    redis.call('HSET', KEYS[1], ARGV[i + 2], ARGV[i + 3])
    replaced = replaced + 1
  end
end
if m > 0 then redis.call('HDEL', KEYS[1], 'mb') end  -- sizes changed: counted again when needed
return {OK, replaced, g}
