-- What the langgraph_* scripts share: _thread.SOURCES puts this in front of each of them (and
-- the store's prelude the parts of it that they and this use in front of that).

-- The items of a list packed as "<length>:<bytes>" one after another (_records._lp).
local function items(s)
  local out, at = {}, 1
  while at <= #s do
    local colon = string.find(s, ':', at, true)
    local len = tonumber(string.sub(s, at, colon - 1))
    out[#out + 1] = string.sub(s, colon + 1, colon + len)
    at = colon + len + 1
  end
  return out
end

-- The checks a write to a thread makes before its first write: its session tree's root is a
-- live session (KEYS[1]), the keys' types (the tree's root keys, then the thread's data hash
-- and order zset), and the tree's members as the caller knows them when its deadline moves.
-- Returns the reply that stops the write, or nil and the root's fields f (v, x, tg), the
-- server's time (us, ms), the TTL (ARGV[1]) and whether the deadline moves.
local function thread_write()
  local f = redis.pcall('HMGET', KEYS[1], 'v', 'x', 'tg')
  local refused = root_refused(f)
  if refused then return refused end
  local bad = wrong_type({'hash', 'list', 'hash', 'zset', 'string', 'zset', 'zset', 'hash', 'zset'})
  if bad then return bad end
  local us, now = clock()
  local ttl = tonumber(ARGV[1])
  local extend_now = due(f[2], ttl, now)
  if extend_now and (f[3] or '0') ~= ARGV[3] then return tree_changed(f[3]) end
  return nil, f, us, now, ttl, extend_now
end
