-- rekey_session: switch a session to another data key before its content is re-sealed:
-- from here on writers seal with the new key id; 'r' marks the re-seal as pending.
-- KEYS[1] meta hash
-- ARGV[1] new key id
-- Reply: {OK} | {NOT_FOUND} | {WRONG_TYPE, 1}
-- Events: none. TTL and updated_at are left alone (the session's content does not change).
local bad = wrong_type({'hash'})
if bad then return {WRONG_TYPE, bad} end
if redis.call('EXISTS', KEYS[1]) == 0 then return {NOT_FOUND} end
redis.call('HSET', KEYS[1], 'k', ARGV[1], 'r', '1')
return {OK}
