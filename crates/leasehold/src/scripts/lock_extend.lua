-- lock_extend.lua: reset the expiry of leases we still own; one call renews many.
-- KEYS[i] lock key of lease i
-- ARGV[2i-1] owner token of lease i   ARGV[2i] new ttl of lease i in ms
-- Returns a list with, for each lease: 1 if extended, 0 if missing, -1 if another owner
-- holds it or the key now holds another type (then it is left alone). One odd key must not
-- fail the renewal of the others in the batch, hence pcall.
local out = {}
for i, key in ipairs(KEYS) do
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' then
    out[i] = -1
  elseif holder == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    out[i] = 1
  elseif holder then
    out[i] = -1
  else
    out[i] = 0
  end
end
return out
