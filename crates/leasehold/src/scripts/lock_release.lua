-- lock_release.lua: delete the lease only if we still own it, and wake waiters.
-- KEYS[1] lock key   KEYS[2] release channel
-- ARGV[1] owner token
-- Returns 1 if released, 0 if the lease was missing (expired or released), -1 if another
-- owner holds it (then nothing is changed).
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], '')
  return 1
elseif holder then
  return -1
end
return 0
