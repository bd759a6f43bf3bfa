-- discard_child: remove an unmerged child without touching its parent's messages.
-- KEYS: root child_meta child_msgs child_ids log
-- ARGV: head parent_key child_key call_digest events event
-- OK: tree_generation event_id members
-- KEYS[1..7] the tree's root keys (the parent's; see the prelude)
-- KEYS[8] child meta hash   KEYS[9] child msgs list   KEYS[10] child ids hash
-- KEYS[11] the tree's event log stream
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] parent key   ARGV[6] child key   ARGV[7] call token digest
-- ARGV[8 .. 11] the events group (see log_event)   ARGV[12] the event's fields (JSON members)
-- Reply: {OK, tg, the event's id ('' for a retry of this call or with no log), member...} | {NOT_FOUND} | {MERGED} | {WRONG_TYPE, i, type}
-- Events: 'discard', only when this call discarded; the first write (ZADD) is refused at OOM. The child's keys go at once; the parent's
-- done zset keeps a tombstone, and the call token's digest in the parent's id window lets a
-- retry of this very call answer OK again.
local bad = wrong_type({'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'hash', 'list',
  'hash', 'stream'})
if bad then return bad end
local f = redis.call('HMGET', KEYS[1], 'tg', 'n', 'v', 'x')
local win, stop = open_window(3, f[2], 1, 0, 1, {ARGV[7]})
if not win then return stop end
if has(win, ARGV[7]) then
  local reply = tree_changed(f[1])
  reply[1] = OK
  table.insert(reply, 3, '')
  return reply
end
local c = redis.call('HMGET', KEYS[8], 'parent', 'merged_at', 'mt', 'mx')
local st = child_state(c, ARGV[5], ARGV[6])
if st == MERGED or (type(st) == 'table' and st[1] == PRUNED) then return {MERGED} end
if st ~= OK then return st end
local us, now = clock()
if leased(c[3], c[4], now, '') then return {MERGED} end

local tg = tonumber(f[1] or '0') + 1
if f[3] then  -- a live parent records the discard (a damaged one only loses the child)
  tombstone('d', ARGV[6], us)
  add(win, {ARGV[7]}, tonumber(ARGV[4]))
  save_window(win)
  redis.call('HSET', KEYS[1], 'tg', tg)
  join_tree(f[4], {7})
end
redis.call('UNLINK', KEYS[8], KEYS[9], KEYS[10])
redis.call('ZREM', KEYS[6], ARGV[6])
if f[3] then redis.call('HSET', KEYS[1], 'kc', redis.call('ZCARD', KEYS[6])) end
local id = log_event(11, 8, 'discard', ARGV[12], now)
local reply = tree_changed(tg)
reply[1] = OK
table.insert(reply, 3, id)
return reply
