-- append_message: append messages, skip ids already appended, trim, refresh TTL and index;
-- set metadata entries along with them when at least one message is new.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] max messages (0 = all)
-- ARGV[4] session key (index member)
-- ARGV[5] key id the elements and metadata values are sealed with ('' = cleartext)
-- ARGV[6] m = number of metadata arguments that follow (field/value pairs: 'm:' .. name,
--   value or 'e:' .. name, sealed value), ARGV[7 .. 6+m]
-- ARGV[7+m ..] message pairs: 8-byte id digest, stored element (JSON, or id prefix + sealed)
-- Reply: {OK, number appended} | {NOT_FOUND} | {EXPIRED} | {KEY_CHANGED, k} | {WRONG_TYPE, i}
-- Events: none.
-- A message whose id digest the session holds is skipped, so a call retried after a lost
-- reply stores nothing twice and still answers OK; when every message is skipped the metadata
-- is not set either, so a retry cannot undo a later writer's entries. The hot path: every
-- key's type is checked by the first command on it (redis.pcall), and the first write to each
-- key that could fail comes before any write that could not, so a foreign key type leaves
-- nothing half-written.
-- Each id bucket is read once and written once.
local f = redis.pcall('HMGET', KEYS[1], 'v', 'k')
if failed(f) then return {WRONG_TYPE, 1} end
if not f[1] then
  local marker = redis.pcall('HEXISTS', KEYS[3], 'c')
  if failed(marker) then return {WRONG_TYPE, 3} end
  if marker == 1 then return {EXPIRED} end
  return {NOT_FOUND}
end
if (f[2] or '') ~= ARGV[5] then return {KEY_CHANGED, f[2] or ''} end

local m = tonumber(ARGV[6])
local buckets, dirty, new = {}, {}, {}
for i = 7 + m, #ARGV, 2 do
  local d = ARGV[i]
  local f = bucket(d)
  local b = buckets[f]
  if b == nil then
    b = redis.pcall('HGET', KEYS[3], f)
    if failed(b) then return {WRONG_TYPE, 3} end
    b = b or ''
  end
  if held_in(b, d) then
    buckets[f] = b
  else
    buckets[f] = b .. d
    if not dirty[f] then
      dirty[f] = true
      dirty[#dirty + 1] = f
    end
    new[#new + 1] = i
  end
end
if #new == 0 then return {OK, 0} end

local us, ms = clock()
if failed(redis.pcall('ZADD', KEYS[4], ms, ARGV[4])) then return {WRONG_TYPE, 4} end
local len = redis.pcall('RPUSH', KEYS[2], ARGV[new[1] + 1])
if failed(len) then return {WRONG_TYPE, 2} end
for n = 2, #new do len = redis.call('RPUSH', KEYS[2], ARGV[new[n] + 1]) end
local max = tonumber(ARGV[3])
if max > 0 and len > max then redis.call('LTRIM', KEYS[2], -max, -1) end
local fields = {}
for _, f in ipairs(dirty) do
  fields[#fields + 1] = f
  fields[#fields + 1] = buckets[f]
end
redis.call('HSET', KEYS[3], unpack(fields))
redis.call('HSET', KEYS[1], 'updated_at', us)
if m > 0 then hcall_from('HSET', KEYS[1], 7, 6 + m) end
touch({KEYS[1], KEYS[2]}, KEYS[3], ARGV[1], ARGV[2])
return {OK, #new}
