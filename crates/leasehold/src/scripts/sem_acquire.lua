-- sem_acquire.lua: take one permit of a semaphore if fewer than its permits are held.
-- KEYS[1] semaphore key (sorted set; member '<permits>:<hold id>', score = its expiry in
-- server ms)   KEYS[2] fence key
-- ARGV[1] permits (N, a positive integer)   ARGV[2] hold id   ARGV[3] ttl in ms
-- ARGV[4] fence memory in ms (see prelude.lua)
-- Returns {1, fence} when the permit is taken (or was already this hold's: a retry after a
-- lost reply), {0, ms} when all N are held (ms: until the first of them expires), {-1, n}
-- when live permits were taken by clients that count n permits, not N, {-2, 0} when the set
-- belongs to another kind of lock (an RwLock's); nothing is written in either case.
-- Every permit is its own lease: expired ones are pruned here, and the key expires with
-- the last. N travels in each member, so it lives exactly as long as a permit does: once
-- every permit is gone, the next caller's N counts.
local refused = foreign_keys({{1, 'zset', LEASE_MEMBER}, {2, 'string', FENCE}})
if refused then
  return refused
end
local key, permits = KEYS[1], ARGV[1]
local now = now_ms()
-- An RwLock's set has the same type; its members start with a kind letter, not a number.
-- (ZRANGE also fails on a key of another type before anything is written.)
local oldest = redis.call('ZRANGE', key, 0, 0)[1]
if oldest and not string.find(oldest, '^%d+:') then
  return {-2, 0}
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local first = redis.call('ZRANGE', key, 0, 0)[1]
if first then
  local theirs = string.sub(first, 1, string.find(first, ':', 1, true) - 1)
  if theirs ~= permits then
    return {-1, tonumber(theirs)}
  end
end
local member = permits .. ':' .. ARGV[2]
if not redis.call('ZSCORE', key, member) and redis.call('ZCARD', key) >= tonumber(permits) then
  local soonest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, math.max(1, tonumber(soonest[2]) - now)}
end
local fence, refused = next_fence(KEYS[2], ARGV[4])
if not fence then
  return refused
end
redis.call('ZADD', key, now + tonumber(ARGV[3]), member)
local top = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
redis.call('PEXPIRE', key, math.max(1, tonumber(top[2]) - now))
return {1, fence}
