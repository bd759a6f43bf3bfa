-- rekey_session: give a session another key record (meta fields k, dk): move it to this
-- layout's own data key, rewrap it for a new passphrase, or mark a move to it as done; only if
-- the session's key is still what the caller read.
-- KEYS: meta
-- ARGV: kid dk new_kid new_dk
-- OK: -
-- KEYS[1] meta hash
-- ARGV[1] the key id read ('' = none)   ARGV[2] the dk read ('' = none)
-- ARGV[3] the new key id   ARGV[4] the new dk
-- Reply: {OK} | {NOT_FOUND} | {CONFLICT} (the key changed meanwhile: read again)
--        | {WRONG_TYPE, 1, type}
-- Events: none. TTL and updated_at are left alone (the session's content does not change);
-- from here on writers seal with the new key (they follow it on KEY_CHANGED).
local bad = wrong_type({'hash'})
if bad then return bad end
local f = redis.call('HMGET', KEYS[1], 'v', 'k', 'dk')
if not f[1] then return {NOT_FOUND} end
if (f[2] or '') ~= ARGV[1] or (f[3] or '') ~= ARGV[2] then return {CONFLICT} end
redis.call('HSET', KEYS[1], 'k', ARGV[3], 'dk', ARGV[4])
redis.call('HDEL', KEYS[1], 'r')
return {OK}
