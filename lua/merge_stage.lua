-- merge_stage: one step of a large merge, which builds the parent's new list in a staging list
-- (the parent's messages, then the child's) while both stay as they are; merge_child
-- ('staged') then swaps it in at once, so readers see the parent before or after, never half.
-- KEYS: root child_meta child_msgs child_ids stage
-- ARGV: head parent_key child_key call_token step from_ to staged generation lease_ms kid budget
-- OK: generation head tail child_head child_tail | upto length child_staged
-- KEYS[1..7] the tree's root keys (the parent's; see the prelude)
-- KEYS[8] child meta hash   KEYS[9] child msgs list   KEYS[10] child ids hash
-- KEYS[11] the staging list
-- ARGV[1] ttl ms   ARGV[2] grace ms   ARGV[3] tree generation known   ARGV[4] id window
-- ARGV[5] parent key   ARGV[6] child key   ARGV[7] the merge's call token
-- ARGV[8] 'begin', 'parent' or 'child'   ARGV[9] from and ARGV[10] to (absolute positions in
-- the parent's or the child's list)   ARGV[11] the staging list's length so far
-- ARGV[12] the parent's list generation the merge began in   ARGV[13] lease ms
-- ARGV[14] the caller's key id for the parent   ARGV[15] bytes to copy at most
-- Reply: begin: {OK, g, h, n of the parent, h, n of the child}; a copy step: {OK, upto,
--        staging length, child messages staged by this step}
--        | {NOT_FOUND} | {PRUNED, at} | {MERGED} (merged, or another call's merge is under way)
--        | {PARENT_GONE, st} | {KEY_CHANGED, k, dk} | {STALE} (the parent's list began a new
--        generation, or this call's lease was lost: begin again) | {WRONG_TYPE, i, type}
-- Events: none. 'begin' takes the child's merge lease (meta fields mt, mx: no messages are
-- added to it and no other merge takes it meanwhile); every step renews it and checks that the
-- staging list holds what the caller staged so far, so a retried step copies nothing twice.
-- The staging list expires with the lease. Child messages it inherited, or whose ids the
-- parent's window holds, are left out, as in a merge in one step.
local bad = wrong_type({'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'hash', 'list',
  'hash', 'list'})
if bad then return bad end
local c = redis.call('HMGET', KEYS[8], 'parent', 'merged_at', 'g', 'h', 'n', 'mt', 'mx')
local st = child_state(c, ARGV[5], ARGV[6])
if st == MERGED then return {MERGED} end
if st ~= OK then return st end
local f = redis.call('HMGET', KEYS[1], 'v', 'k', 'g', 'h', 'n')
if not f[1] then
  st = gone(1, 2, 3, 5)
  if st[1] == DAMAGED then return st end
  return {PARENT_GONE, st[1]}
end
if f[1] ~= SCHEMA then return {DAMAGED, 1, 'version', f[1]} end
if (f[2] or '') ~= ARGV[14] then return key_changed(f[2]) end
local _, now = clock()
local step, lease = ARGV[8], tonumber(ARGV[13])
if step == 'begin' then
  if leased(c[6], c[7], now, ARGV[7]) then return {MERGED} end
  local g, h, n = positions(f[3], f[4], f[5], 2)
  if not g then return h end
  local cg, ch, cn = positions(c[3], c[4], c[5], 9)
  if not cg then return ch end
  redis.call('HSET', KEYS[8], 'mt', ARGV[7], 'mx', now + lease)
  redis.call('DEL', KEYS[11])
  return {OK, g, h, n, ch, cn}
end
if c[6] ~= ARGV[7] then return {STALE} end  -- the lease went to another merge
local staged = tonumber(ARGV[11])
if redis.call('LLEN', KEYS[11]) ~= staged then return {STALE} end
local from, to, budget = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[15])
local upto, pushed
if step == 'parent' then
  local g, h, n = positions(f[3], f[4], f[5], 2)
  if not g then return h end
  if tostring(g) ~= ARGV[12] or from < h or to > n then return {STALE} end
  local elements
  elements, upto = read_from(2, h, from, to, budget)
  redis.call('HSET', KEYS[8], 'mx', now + lease)
  push_all(KEYS[11], elements)
  pushed = 0
else
  local _, ch = positions(c[3], c[4], c[5], 9)
  if not _ then return ch end
  local items
  items, upto = read_from(9, ch, from, to, budget)
  local digests = {}
  for i, m in ipairs(items) do digests[i] = string.sub(m, 1, 8) end
  local win, stop = open_window(3, f[5], 1, 0, 1, digests)
  if not win then return stop end
  local out, taken = {}, {}
  for _, m in ipairs(items) do
    local d = string.sub(m, 1, 8)
    if d ~= INHERITED and not taken[d] and not has(win, d) then
      out[#out + 1] = string.sub(m, 9)
      taken[d] = true
    end
  end
  redis.call('HSET', KEYS[8], 'mx', now + lease)
  push_all(KEYS[11], out)
  pushed = #out
end
redis.call('PEXPIRE', KEYS[11], lease)
return {OK, upto, redis.call('LLEN', KEYS[11]), pushed}
