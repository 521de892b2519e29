-- lock_extend.lua: reset the expiry of leases we still own; one call renews many.
-- KEYS[i] lock key of lease i
-- ARGV[2i-1] owner token of lease i   ARGV[2i] new ttl of lease i in ms
-- Returns a list with, for each lease: 1 if extended, 0 if missing, -1 if another owner
-- holds it or the key now holds another type (then it is left alone): the prelude's
-- holder_check, in its each_lease.
return each_lease(#KEYS, function(i)
  local owned = holder_check(KEYS[i], ARGV[2 * i - 1])
  if owned == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
  end
  return owned
end)
