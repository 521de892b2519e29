#!lua flags=no-writes
-- lock_status.lua: read a lock's state without changing it (the flag above makes Redis
-- refuse any write).
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] alive (see lock_acquire.lua)
-- Returns {holder token or false, pttl of the lease in ms (-2 if none), last fence or false,
-- number of queued waiters whose deadline has not passed}.
local now = now_ms()
return {
  redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]),
  redis.call('ZCOUNT', KEYS[3], '(' .. string.format('%d', now), '+inf'),
}
