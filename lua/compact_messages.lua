-- compact_messages: replace messages 0..up_to (inclusive) with one summary message, first.
-- KEYS[1] meta hash   KEYS[2] msgs list   KEYS[3] ids hash   KEYS[4] index zset
-- ARGV[1] ttl ms (0 = none)   ARGV[2] expiry-marker grace ms   ARGV[3] session key
-- ARGV[4] up_to (0-based, inclusive)   ARGV[5] summary id digest   ARGV[6] summary JSON
-- ARGV[7] expected prefix of message up_to ('{"id":"<id>",'), or '' for no check
-- ARGV[8] events channel ('' = none)   ARGV[9] 'compact' event JSON
-- ARGV[10] key id the summary is sealed with ('' = cleartext)
-- Reply: {OK, messages removed} | {OUT_OF_RANGE, length} | {STALE} | {NOT_FOUND} | {EXPIRED}
--        | {KEY_CHANGED, k} | {WRONG_TYPE, i}
-- Events: 'compact', only when this call compacted.
-- Messages appended after the caller read the history stay after the summary. A retried call
-- (the summary's digest already held) changes nothing and answers {OK, 0}.
local refused = write_refused(ARGV[10])
if refused then return refused end
if has_digest(KEYS[3], ARGV[5]) then return {OK, 0} end
local up_to = tonumber(ARGV[4])
local len = redis.call('LLEN', KEYS[2])
if up_to < 0 or up_to >= len then return {OUT_OF_RANGE, len} end
local expect = ARGV[7]
if expect ~= '' then
  local m = redis.call('LINDEX', KEYS[2], up_to)
  if string.sub(m, 1, #expect) ~= expect then return {STALE} end
end

redis.call('LTRIM', KEYS[2], up_to + 1, -1)
redis.call('LPUSH', KEYS[2], ARGV[6])
add_digest(KEYS[3], ARGV[5])
bump(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[1], ARGV[2])
emit(ARGV[8], ARGV[9])
return {OK, up_to + 1}
