-- lock_status.lua: read a lock's state without changing it.
-- KEYS[1] lock key   KEYS[2] fence key
-- Returns {holder token or false, pttl of the lease in ms (-2 if none), last fence or false}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
