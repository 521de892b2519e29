-- rw_extend.lua: renew RwLock holds, each on its own; one call renews many.
-- Also renews semaphore permits (sem_acquire.lua), whose set has the same shape.
-- KEYS[i] rw key (sorted set, see rw_acquire.lua) of hold i
-- ARGV[2i-1] member of hold i   ARGV[2i] new ttl of hold i in ms
-- Returns a list with, for each hold: 1 if renewed (its score is now + ttl; no other entry
-- changes), 0 if it is missing or expired, -1 if the key holds another type (left alone).
-- The key's expiry only grows here (PEXPIRE GT), to cover the renewed hold.
local now = now_ms()
return each_lease(#KEYS, function(i)
  local key, member, ttl = KEYS[i], ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local score = redis.pcall('ZSCORE', key, member)
  if type(score) == 'table' then
    return -1
  elseif score and tonumber(score) > now then
    redis.call('ZADD', key, 'XX', now + ttl, member)
    pexpire_gt(key, ttl)
    return 1
  end
  return 0
end)
