-- append_message: append messages, skip ids already appended, trim, refresh TTL and index.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] max messages (0 = all)
-- ARGV[4] session key (index member)
-- ARGV[5 ..] message pairs: 8-byte id digest, message JSON
-- Reply: {OK, number appended, list length} | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i}
-- Events: none.
-- A message whose id digest the session holds is skipped, so a call retried after a lost
-- reply stores nothing twice and still answers OK.
local bad = wrong_type({'hash', 'list', 'hash', 'zset'})
if bad then return {WRONG_TYPE, bad} end
local st = session_state(KEYS[1], KEYS[3])
if st ~= OK then return {st} end

local added = 0
for i = 5, #ARGV, 2 do
  if not has_digest(KEYS[3], ARGV[i]) then
    redis.call('RPUSH', KEYS[2], ARGV[i + 1])
    add_digest(KEYS[3], ARGV[i])
    added = added + 1
  end
end
if added > 0 then
  local max = tonumber(ARGV[3])
  if max > 0 then redis.call('LTRIM', KEYS[2], -max, -1) end
  bump(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[1], ARGV[2])
end
return {OK, added, redis.call('LLEN', KEYS[2])}
