-- discard_children: remove one batch of a session's children on the way to its delete, so that
-- deleting a session with many children is made of bounded steps (each child costs server
-- time: its checks, its keys unlinked, its event) instead of one script that keeps every
-- other client waiting.
-- KEYS: root log gone *child_records
-- ARGV: call_token events *children
-- OK: done event_ids
-- KEYS[1..7] the tree's root keys (see the prelude)   KEYS[8] the tree's event log stream
-- KEYS[9] the session's 'gone' string (see delete)
-- KEYS[10 ..] child meta, child msgs, child ids, child staging list for each child, in the
--         order the caller read them from KEYS[6]
-- ARGV[1] the delete's call token ('': none)   ARGV[2 .. 5] the events group (see log_event)
-- ARGV[6 ..] per child, as read from KEYS[6]: its key, the fields of its 'discard' event ('' for
--         a damaged member: none)
-- Reply: {OK, 0, per child the id of its 'discard' event when it was live ('' with no log), else
--        0 (not live: merged or damaged, removed without an event; or no longer a member: left
--        alone)}
--        | {OK, 1} when KEYS[9] holds ARGV[1]: the delete this batch belongs to was done (a
--          session created under the key since keeps its children)
--        | {WRONG_TYPE, i, type} | {DAMAGED, i, 'foreign'} (KEYS[i] is another program's key, a
--        value of another type or a hash without a schema version: nothing removed)
-- Events: 'discard' for each live (unmerged) child of a live session removed, as delete logs
-- them. A child still a member of KEYS[6] is removed whatever its state (as delete removes it:
-- a merge lease does not keep it); one that is not any more is left alone, so that the batch
-- applied twice (a retry after a lost reply) removes and logs nothing twice. A live parent
-- records each removal as the store's other removals do: a discarded child's tombstone 'd'
-- (as discard_child), a merged one's 'm' at its merge time (as a merge that prunes it), the
-- tree generation, the child count; so that a session whose delete stops between batches is a
-- consistent session with fewer children. The first writes (UNLINK, ZREM) are ones Redis
-- makes when it is out of memory: like delete, the batches free memory at maxmemory.
local types = {'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'stream', 'string'}
local bad = wrong_type(with_children(types, 10))
if bad then return bad end
if ARGV[1] ~= '' and redis.call('GET', KEYS[9]) == ARGV[1] then return {OK, 1} end
local f = redis.call('HMGET', KEYS[1], 'v', 'tg', 'x')
if not f[1] and redis.call('EXISTS', KEYS[1]) == 1 then return {DAMAGED, 1, 'foreign'} end
local reply, live, merged, gone, members = {OK, 0}, {}, {}, {}, {}
for n = 1, (#ARGV - 5) / 2 do
  local member, k = ARGV[4 + 2 * n], 6 + 4 * n
  -- hashes this store wrote hold 'v' (an absent one reads as {false, false}: not live)
  local c = redis.call('HMGET', KEYS[k], 'v', 'merged_at')
  if not c[1] and redis.call('EXISTS', KEYS[k]) == 1 then return {DAMAGED, k, 'foreign'} end
  reply[2 + n] = 0
  if redis.call('ZSCORE', KEYS[6], member) then
    live[n] = f[1] and c[1] and not c[2] and ARGV[5 + 2 * n] ~= ''
    local at = f[1] and c[1] and c[2] and string.match(c[2], '^%d+$')
    if at and #at <= 16 then merged[n] = at end  -- as a merge writes it (else: no tombstone)
    members[#members + 1] = member
    for j = k, k + 3 do gone[#gone + 1] = KEYS[j] end
  end
end
if #members == 0 then return reply end
-- What frees memory first (neither is refused when Redis is out of memory), then what adds.
for i = 1, #gone, 1000 do redis.call('UNLINK', unpack(gone, i, math.min(i + 999, #gone))) end
for i = 1, #members, 1000 do
  redis.call('ZREM', KEYS[6], unpack(members, i, math.min(i + 999, #members)))
end
local us, now = clock()
for n = 1, (#ARGV - 5) / 2 do
  if live[n] then
    tombstone('d', ARGV[4 + 2 * n], us)
    reply[2 + n] = log_event(8, 2, 'discard', ARGV[5 + 2 * n], now)
  elseif merged[n] then  -- as a merge that prunes it: a retried merge still finds its success
    tombstone('m', ARGV[4 + 2 * n], merged[n])
  end
end
if f[1] then
  redis.call('HSET', KEYS[1], 'tg', tonumber(f[2] or '0') + 1, 'kc', redis.call('ZCARD', KEYS[6]))
  join_tree(f[3], {7})
end
return reply
