-- reentrant_extend.lua: keep reentrant holds alive; one call renews many.
-- KEYS[i] lock key (hash) of hold i
-- ARGV[2i-1] hold id of hold i   ARGV[2i] new ttl of hold i in ms
-- Returns a list with, for each hold: 1 if the hold was live (it now ends ttl from now, and
-- the key no sooner), 0 if the lock is missing or the hold ended (it is dropped), -1 if the
-- lock exists without this hold (another owner holds it, or the hold was released) or the key
-- holds another type (left alone).
-- The key's expiry only grows (PEXPIRE GT): the owner's other holds may have asked for longer.
local now = now_ms()
return each_lease(#KEYS, function(i)
  local key, field = KEYS[i], 'h:' .. ARGV[2 * i - 1]
  local value = redis.pcall('HGET', key, field)
  if type(value) == 'table' then
    return -1
  elseif value and hold_live(value, now) then
    redis.call('HSET', key, field, string.format('%d', now + tonumber(ARGV[2 * i])))
    pexpire_gt(key, ARGV[2 * i])
    return 1
  elseif value then
    redis.call('HDEL', key, field)
    return 0
  elseif redis.call('EXISTS', key) == 1 then
    return -1
  end
  return 0
end)
