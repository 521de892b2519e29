-- lock_acquire.lua: take the lease if it is free or already ours (a retry after a lost
-- reply, or a hand-off from the last holder), and issue a fencing token; otherwise, for a
-- caller that will wait, join the queue of waiters.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue (zset: waiter token -> arrival, µs)
-- KEYS[4] alive (zset: waiter token -> deadline, ms of server time)
-- ARGV[1] owner token   ARGV[2] lease ttl in ms   ARGV[3] fence memory in ms: how long the
--         last fence is kept at least (see prelude.lua)
-- ARGV[4] queue window in ms: how long a waiter stays queued without trying again
--         (0: the caller does not wait, so it does not queue)
-- ARGV[5] '1' if this caller may already be queued (an earlier attempt was refused)
-- ARGV[6] '1' for a fair lock: a free lease goes to the caller only if no live waiter is
--         ahead of it in the queue; waiters past their deadline are pruned first
-- ARGV[7] the caller's connection id: a queued waiter is the member '<id>:<token>', and a
--         lease handed to it is announced on '<release channel>:<id>' (lock_release.lua)
-- Returns {1, fence} when the caller holds the lease now, {0, pttl} when another owner
-- holds it (pttl: the holder's remaining ms, -1 if the key has no expiry).
-- Fences come from next_fence (prelude.lua), as for every kind of lock: on one server and
-- on each Redlock node alike, so the nodes' fences are comparable.
local member = ARGV[7] .. ':' .. ARGV[1]
local function refuse()
  local window = tonumber(ARGV[4])
  if window > 0 then
    local now = redis.call('TIME')
    redis.call('ZADD', KEYS[3], 'NX', now[1] .. string.format('%06d', now[2]), member)
    local deadline = now[1] * 1000 + math.floor(now[2] / 1000) + window
    redis.call('ZADD', KEYS[4], string.format('%d', deadline), member)
    redis.call('PEXPIRE', KEYS[3], window)
    redis.call('PEXPIRE', KEYS[4], window)
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if ARGV[6] == '1' and not redis.call('GET', KEYS[1]) then
  for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms())) do
    redis.call('ZREM', KEYS[3], dead)
    redis.call('ZREM', KEYS[4], dead)
  end
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head and head ~= member then
    return refuse()
  end
end
local holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if holder and holder ~= ARGV[1] then
  return refuse()
end
if holder then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local fence, refused = next_fence(KEYS[2], ARGV[3])
if not fence then
  -- The fence key holds something else: leave it alone and undo our SET.
  if not holder then
    redis.call('DEL', KEYS[1])
  end
  return refused
end
-- A queued caller leaves the queue once it holds the lease, whether it found the lease free
-- or handed to it (a waiter handed the lease keeps its place until it claims it).
if ARGV[5] == '1' then
  redis.call('ZREM', KEYS[3], member)
  redis.call('ZREM', KEYS[4], member)
end
return {1, fence}
