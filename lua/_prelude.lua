-- Shared prelude: redis_session/scripts.py puts the parts of this file that a script uses in
-- front of it (each blank-line separated block: one definition with its comment).
-- Lua 5.1, portable between Redis >= 7, Valkey and fakeredis: no globals, no table.unpack,
-- no cmsgpack/bit/struct, numbers that matter travel as strings.
--
-- Status codes (the first element of every reply; redis_session/status.py maps them):
--   0 OK, 1 NOT_FOUND, 2 EXPIRED, 3 EXISTS, 4 OUT_OF_RANGE, 5 STALE, 6 MERGED,
--   7 CONFLICT, 8 MISSING, 9 WRONG_TYPE (reply {9, i}: KEYS[i] holds a foreign type),
--   10 PARENT_GONE (reply {10, NOT_FOUND or EXPIRED}: a child's parent session is gone)
--   11 KEY_CHANGED (reply {11, k}: the session is sealed with key id k, '' = cleartext)
local OK, NOT_FOUND, EXPIRED, EXISTS, OUT_OF_RANGE, STALE, MERGED, CONFLICT, MISSING, WRONG_TYPE,
  PARENT_GONE, KEY_CHANGED = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11

-- Writers seal what they add with the session's own data key, whose id is the meta field 'k'
-- ('' or absent: cleartext). The session's key id when it is not kid, else nil.
local function other_key(meta, kid)
  local k = redis.call('HGET', meta, 'k') or ''
  if k ~= kid then return k end
  return nil
end

-- Server clock: microseconds and milliseconds since the epoch, as decimal strings.
local function clock()
  local t = redis.call('TIME')
  local us = t[1] .. string.format('%06d', tonumber(t[2]))
  return us, string.sub(us, 1, -4)
end

-- Index of the first KEYS[i] whose type is neither 'none' nor types[i], or nil.
local function wrong_type(types)
  for i, want in ipairs(types) do
    local got = redis.call('TYPE', KEYS[i])['ok']
    if got ~= 'none' and got ~= want then return i end
  end
  return nil
end

-- OK when the session's meta hash exists, EXPIRED when only its ids hash (the expiry
-- marker, which outlives the data by a grace period) is left, else NOT_FOUND.
local function session_state(meta, ids)
  if redis.call('EXISTS', meta) == 1 then return OK end
  if redis.call('HEXISTS', ids, 'c') == 1 then return EXPIRED end
  return NOT_FOUND
end

-- Whether a write to the session whose KEYS are meta hash, msgs list, ids hash, index zset must
-- stop before it begins: the reply to return ({WRONG_TYPE, i}, {NOT_FOUND}, {EXPIRED} or
-- {KEY_CHANGED, k}), or nil to go on. kid: the key id the caller sealed with ('' = cleartext).
local function write_refused(kid)
  local bad = wrong_type({'hash', 'list', 'hash', 'zset'})
  if bad then return {WRONG_TYPE, bad} end
  local st = session_state(KEYS[1], KEYS[3])
  if st ~= OK then return {st} end
  local k = other_key(KEYS[1], kid)
  if k then return {KEY_CHANGED, k} end
  return nil
end

-- Sliding expiry: data keys live ttl_ms, the ids hash (expiry marker) ttl_ms + grace_ms.
local function touch(data_keys, ids, ttl_ms, grace_ms)
  local ttl = tonumber(ttl_ms)
  if ttl <= 0 then return end
  for i = 1, #data_keys do redis.call('PEXPIRE', data_keys[i], ttl) end
  redis.call('PEXPIRE', ids, ttl + tonumber(grace_ms))
end

-- Message-id digests (8 bytes each) packed in 128 buckets of the ids hash: a bucket stays
-- small (~0.6 KB at 10,000 messages), so reading and rewriting it is cheap, and up to ~1,000
-- messages the hash keeps Redis's compact encoding.
local function bucket(d)
  return string.format('%x', string.byte(d, 1) % 128)
end

local function held_in(b, d)
  if not b or b == '' then return false end
  local pos = 1
  while true do
    local s = string.find(b, d, pos, true)
    if not s then return false end
    if (s - 1) % 8 == 0 then return true end
    pos = s + 1
  end
end

local function has_digest(ids, d)
  return held_in(redis.call('HGET', ids, bucket(d)), d)
end

-- A redis.pcall reply that is an error (e.g. WRONGTYPE) rather than a value.
local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

local function add_digest(ids, d)
  local f = bucket(d)
  redis.call('HSET', ids, f, (redis.call('HGET', ids, f) or '') .. d)
end

-- HSET (or HDEL) key with ARGV[first .. last], in chunks that stay under Lua's unpack limit.
local function hcall_from(cmd, key, first, last)
  local chunk = {}
  for i = first, last do
    chunk[#chunk + 1] = ARGV[i]
    if #chunk == 1000 then
      redis.call(cmd, key, unpack(chunk))
      chunk = {}
    end
  end
  if #chunk > 0 then redis.call(cmd, key, unpack(chunk)) end
end

-- Publish a lifecycle event (its JSON built by the caller); '' as channel publishes nothing.
local function emit(channel, payload)
  if channel ~= '' then redis.call('PUBLISH', channel, payload) end
end

-- A write to a session: bump updated_at, refresh the TTL of its keys, re-score it in the index.
local function bump(meta, msgs, ids, index, key, ttl_ms, grace_ms)
  local us, ms = clock()
  redis.call('HSET', meta, 'updated_at', us)
  touch({meta, msgs}, ids, ttl_ms, grace_ms)
  redis.call('ZADD', index, ms, key)
  return us
end

-- The digest of a child message inherited from the parent at fork: never merged back.
local INHERITED = string.rep('\0', 8)

-- Whether meta (a child's hash) is a live child of parent: OK, MERGED, or NOT_FOUND (missing,
-- discarded, or a child of another session).
local function child_state(meta, parent)
  local f = redis.call('HMGET', meta, 'parent', 'discarded', 'merged_at')
  if not f[1] or f[2] or f[1] ~= parent then return NOT_FOUND end
  if f[3] then return MERGED end
  return OK
end
