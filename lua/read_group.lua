-- read_group: the next entries of an event log for a member of a consumer group, with the
-- group's position before them, in one step (so that the caller tells a gap: entries trimmed
-- from the log before the group was given them).
-- KEYS: log
-- ARGV: group consumer count
-- OK: delivered entries
-- KEYS[1] an event log stream
-- ARGV[1] the group   ARGV[2] the consumer (member)   ARGV[3] the most entries to take
-- Reply: {OK, the group's last delivered id before this call, {{id, {field, value, ...}}, ...}}
--        | {NOT_FOUND} (no stream) | {MISSING} (no such group) | {WRONG_TYPE, 1, type}
-- Events: none. XREADGROUP makes the entries pending for the consumer until XACK; the first
-- entry's 'p' (the entry before it) later than the group's last delivered id means entries
-- were trimmed that the group never got.
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then return {NOT_FOUND} end
if t ~= 'stream' then return {WRONG_TYPE, 1, t} end
local last
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, at
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then at = g[i + 1] end
  end
  if name == ARGV[1] then last = at end
end
if not last then return {MISSING} end
local got = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
  'STREAMS', KEYS[1], '>')
local entries = {}
if got then
  if type(got[1]) == 'table' then got = got[1] end  -- Redis: a list of streams; fakeredis: one
  entries = got[2]
end
return {OK, last, entries}
