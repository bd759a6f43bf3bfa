-- langgraph_walk: the parent chain of one checkpoint, nearest ancestor first, for LangGraph's
-- DeltaChannel (RedisSaver.get_delta_channel_history): per ancestor its pending writes and the
-- stored values of the channels still looked for; a channel is no longer looked for past the
-- first ancestor holding a value of it.
-- KEYS: data order
-- ARGV: start high low steps *channels
-- OK: walked last
-- KEYS[1] the thread's data hash   KEYS[2] the thread's order zset
-- ARGV[1] the checkpoint whose ancestors are walked: '<ns>\0<checkpoint id>', or '' = the
--   newest of the range ARGV[2] (high) .. ARGV[3] (low) (ZREVRANGEBYLEX bounds); its own
--   writes and values are not returned
-- ARGV[4] steps: at most this many ancestors (the caller walks on from the last one)
-- ARGV[5 ..] the channels looked for
-- Reply: {OK, {start, {ancestor, {channel, value...}, {write...}}...}, last} (start: the
--        checkpoint walked from, '' when there is none; last: the last ancestor returned, to
--        walk on from its parent, '' when the chain or the channels ended)
--        | {WRONG_TYPE, i, type}
-- Events: none. Bounded by steps ancestors, their channels and writes.
local bad = wrong_type({'hash', 'zset'})
if bad then return bad end

local start = ARGV[1]
if start == '' then
  local newest = redis.call('ZREVRANGEBYLEX', KEYS[2], ARGV[2], ARGV[3], 'LIMIT', 0, 1)[1]
  if not newest then return {OK, {''}, ''} end
  start = string.sub(newest, 3)
end
local wanted, left = {}, 0
for i = 5, #ARGV do
  if not wanted[ARGV[i]] then
    wanted[ARGV[i]] = true
    left = left + 1
  end
end
local walked = {start}
local last = start
local r = redis.call('HGET', KEYS[1], 'r\0' .. start)
local cp = r and items(r)[2] or ''
local steps = tonumber(ARGV[4])
while cp ~= '' and left > 0 and steps > 0 do
  r = redis.call('HGET', KEYS[1], 'r\0' .. cp)
  if not r then
    cp = ''
    break
  end
  local refs = items(r)
  local ns = string.sub(cp, 1, string.find(cp, '\0', 1, true) - 1)
  local found, ended = {}, {}
  for i = 3, #refs do
    local rest = string.sub(refs[i], #ns + 4)
    local channel = string.sub(rest, 1, string.find(rest, '\0', 1, true) - 1)
    if wanted[channel] then
      local value = redis.call('HGET', KEYS[1], refs[i])
      if value then
        found[#found + 1] = channel
        found[#found + 1] = value
        ended[#ended + 1] = channel
      end
    end
  end
  local fields = redis.call('ZRANGEBYLEX', KEYS[2], '[w\0' .. cp .. '\0', '(w\0' .. cp .. '\1')
  local writes = {}
  if #fields > 0 then writes = redis.call('HMGET', KEYS[1], unpack(fields)) end
  walked[#walked + 1] = {cp, found, writes}
  last = cp
  for _, channel in ipairs(ended) do
    wanted[channel] = nil
    left = left - 1
  end
  cp = refs[2]
  steps = steps - 1
end
if cp == '' or left == 0 then last = '' end
return {OK, walked, last}
