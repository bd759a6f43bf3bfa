-- list_sessions: one page of the index, most recently updated first, expired entries dropped.
-- KEYS[1] index zset
-- ARGV[1] ttl ms (0 = none: nothing expires)   ARGV[2] offset   ARGV[3] count (-1 = all)
-- Reply: {OK, flat array of member, score (updated_at ms)}
-- Entries whose updated_at is older than ttl belong to expired sessions and are removed first.
local bad = wrong_type({'zset'})
if bad then return {WRONG_TYPE, bad} end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  local _, ms = clock()
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (tonumber(ms) - ttl))
end
local first = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local last = -1
if count >= 0 then last = first + count - 1 end
if count == 0 then return {OK, {}} end
return {OK, redis.call('ZREVRANGE', KEYS[1], first, last, 'WITHSCORES')}
