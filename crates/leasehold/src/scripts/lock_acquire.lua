-- lock_acquire.lua: take the lease if it is free (or already ours) and issue a fencing token.
-- KEYS[1] lock key   KEYS[2] fence key
-- ARGV[1] owner token   ARGV[2] lease ttl in ms   ARGV[3] fence key ttl in ms
-- Returns {1, fence} when the caller holds the lease now, {0, pttl} when another owner holds
-- it (pttl: the holder's remaining ms, -1 if the key has no expiry).
-- The fence is max(last + 1, server time in microseconds), so it keeps increasing when the
-- fence key expired or the server restarted without persistence, as long as the server
-- clock does not go back. The same token acquiring again (a retry after a lost reply) gets
-- a fresh, higher fence: it never learned the old one.
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
local now = redis.call('TIME')
local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
-- SET .. GET fails on a key of another type before writing anything.
local last = tonumber(redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[3], 'GET'))
if last and last >= fence then
  fence = last + 1
  redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[3])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
