-- reentrant_extend.lua: keep reentrant holds alive; one call renews many.
-- KEYS[i] lock key (hash) of hold i
-- ARGV[2i-1] hold id of hold i   ARGV[2i] new ttl of hold i in ms
-- Returns a list with, for each hold: 1 if the hold exists (the key then ends no sooner than
-- ttl from now), 0 if the lock is missing, -1 if the lock exists without this hold (another
-- owner holds it, or the hold was released) or the key holds another type (left alone).
-- The expiry only grows (PEXPIRE GT): the owner's other holds may have asked for longer.
local out = {}
for i, key in ipairs(KEYS) do
  local exists = redis.pcall('HEXISTS', key, 'h:' .. ARGV[2 * i - 1])
  if type(exists) == 'table' then
    out[i] = -1
  elseif exists == 1 then
    pexpire_gt(key, ARGV[2 * i])
    out[i] = 1
  elseif redis.call('EXISTS', key) == 1 then
    out[i] = -1
  else
    out[i] = 0
  end
end
return out
