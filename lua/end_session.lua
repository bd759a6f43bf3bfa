-- end_session: mark a session ended (store.end) and log its 'end' event, once.
-- KEYS: root log
-- ARGV: events event
-- OK: ended_at event_id
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the tree's event log stream
-- ARGV[1 .. 4] the events group (see log_event)   ARGV[5] the event's fields (JSON members)
-- Reply: {OK, ended_at_us, the event's id} (ended by this call; '' with no log)
--        | {OK, ended_at_us, false} (ended before: nothing changed, no event)
--        | {NOT_FOUND} | {EXPIRED} | {WRONG_TYPE, i, type} | {DAMAGED, ...}
-- Events: 'end', only when this call ended the session.
-- The mark is the meta field 'ended_at' (microseconds); it moves no deadline and no index
-- score (ending is not a write to the conversation). The first write (HSET) is one Redis
-- refuses when it is out of memory, so a refused end logs nothing.
local f = redis.pcall('HMGET', KEYS[1], 'v', 'ended_at')
local refused = root_refused(f) or log_refused(8)
if refused then return refused end
if f[2] then return {OK, f[2], false} end
local us, now = clock()
redis.call('HSET', KEYS[1], 'ended_at', us)
return {OK, us, log_event(8, 1, 'end', ARGV[5], now)}
