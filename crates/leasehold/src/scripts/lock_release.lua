-- lock_release.lua: give the lease back if we own it, handing it straight to the first
-- live waiter; a caller that does not own it only leaves the queue of waiters.
-- KEYS[1] lock key   KEYS[2] release channel   KEYS[3] queue   KEYS[4] alive
-- (see lock_acquire.lua for the queue)
-- ARGV[1] owner token   ARGV[2] the least a handed-off lease waits for its new owner, in ms
-- ARGV[3] '1' to publish an empty message when the lease is freed with nobody queued (for
--         waiters that do not queue: Redlock's, which retry on any node's release)
-- ARGV[4] the caller's connection id (its queue member is '<id>:<token>')
-- Returns 1 if released, 0 if the lease was missing (expired or released), -1 if another
-- owner holds it (then the lease is not changed).
--
-- The hand-off sets the lock to the next waiter's token and publishes that token on the
-- waiter's connection's own channel: only that waiter's process hears it and only that
-- waiter wakes; its next attempt finds the lease already its own. No one can barge in
-- between, the releasing owner included. The reservation lasts until the waiter's queue
-- deadline (at least ARGV[2]): a live waiter tries again before that deadline even if it
-- missed the message, so it always finds the lease still reserved. The waiter stays at the
-- head of the queue until it claims the lease (lock_acquire.lua takes it out), so if the
-- reservation lapses it keeps its place. A waiter whose deadline passed is skipped; if the
-- chosen one died since, its reservation expires with its deadline. A member without an id
-- (written by hand) is a bare token, announced on the release channel itself.
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  local member = ARGV[4] .. ':' .. ARGV[1]
  redis.call('ZREM', KEYS[3], member)
  redis.call('ZREM', KEYS[4], member)
  if holder then
    return -1
  end
  return 0
end
local now
while true do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not head then
    break
  end
  if not now then
    now = now_ms()
  end
  local deadline = tonumber(redis.call('ZSCORE', KEYS[4], head))
  local channel, waiter = KEYS[2], head
  local split = string.find(head, ':', 1, true)
  if split then
    channel, waiter = KEYS[2] .. ':' .. string.sub(head, 1, split - 1), string.sub(head, split + 1)
  end
  if waiter ~= ARGV[1] and deadline and deadline > now then
    local reserve = math.max(deadline - now, tonumber(ARGV[2]))
    redis.call('SET', KEYS[1], waiter, 'PX', string.format('%d', reserve))
    publish(ARGV[5], channel, waiter)
    return 1
  end
  redis.call('ZREM', KEYS[3], head)
  redis.call('ZREM', KEYS[4], head)
end
redis.call('DEL', KEYS[1])
if ARGV[3] == '1' then
  publish(ARGV[5], KEYS[2], '')
end
return 1
