-- reap_expired: log one 'expire' event for each listed session tree whose deadline passed, and
-- take it off the index, in one step (exactly once, whichever store or listener runs it).
-- KEYS: index log *metas
-- ARGV: events ttl_ms *candidates
-- OK: reaped
-- KEYS[1] an index shard   KEYS[2] the event log stream beside it (the same slot)
-- KEYS[3 ..] the meta hash of each candidate, in ARGV's order
-- ARGV[1 .. 4] the events group (see log_event)   ARGV[5] the store's ttl in ms (> 0)
-- ARGV[6 ..] per candidate: its session key (index member), its event's fields (JSON members)
-- Reply: {OK, session key, event id, session key, event id, ...} for the trees reaped here
--        | {WRONG_TYPE, i, type}
-- Events: 'expire' per tree reaped.
-- A candidate is reaped when the index still lists it with a score (its last write, ms) older
-- than now - ttl - ttl/16, which every write that moves a tree's deadline refreshes: its
-- deadline (at most ttl + ttl/16 after that write) has passed, so its meta hash is gone. A
-- listed tree whose meta hash still exists was kept alive by a store with a longer ttl: its
-- score becomes its last write (the meta field updated_at), and it is not reaped. A candidate
-- another reaper took, or that was written, deleted or created again since the caller read
-- the index, is left alone. Bounded: the caller sends at most a page of candidates.
local bad = wrong_type({'zset', 'stream'})
if bad then return bad end
for i = 3, #KEYS do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= 'hash' then return {WRONG_TYPE, i, t} end
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[5])
local cutoff = now - ttl - math.floor(ttl / 16)
local reply = {OK}
for j = 6, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[j])
  if score and tonumber(score) < cutoff then
    local meta = KEYS[3 + (j - 6) / 2]
    if redis.call('EXISTS', meta) == 1 then
      local at = redis.call('HGET', meta, 'updated_at')
      if at then  -- best effort: at maxmemory the score stays and the tree is looked at again
        redis.pcall('ZADD', KEYS[1], 'XX', math.floor(tonumber(at) / 1000), ARGV[j])
      end
    else
      redis.call('ZREM', KEYS[1], ARGV[j])
      reply[#reply + 1] = ARGV[j]
      reply[#reply + 1] = log_event(2, 1, 'expire', ARGV[j + 1], now)
    end
  end
end
return reply
