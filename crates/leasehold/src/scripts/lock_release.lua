-- lock_release.lua: give the lease back if we own it, handing it straight to the first
-- live waiter; a caller that does not own it only leaves the queue of waiters.
-- KEYS[1] lock key   KEYS[2] release channel   KEYS[3] queue   KEYS[4] heartbeats
-- KEYS[5] fence key (see lock_acquire.lua for the queue)
-- ARGV[1] owner token   ARGV[2] the least a handed-off lease lasts, in ms
-- ARGV[3] '1' to publish an empty message when the lease is freed with nobody queued (for
--         waiters that do not queue: Redlock's, which retry on any node's release)
-- ARGV[4] the caller's connection id
-- ARGV[5] the queue window in ms (lock_acquire.lua)
-- ARGV[6] the TTL in ms the caller queued with, if it may be a queued waiter (its member is
--         '<id>:<ttl>:<token>'), else ''
-- ARGV[7] '1' to publish by SPUBLISH (a cluster with sharded pub/sub), else PUBLISH
-- ARGV[8] '1' to drop the name's last fence with a lease this call frees (the client keeps
--         no fence beyond its lease), else it is kept as long as it was set to be
-- Returns 1 if released, 0 if the lease was missing (expired or released), -1 if another
-- owner holds it (then the lease is not changed).
--
-- The hand-off makes the first live waiter the holder at once, in this one call: it sets
-- the lock to the waiter's token, issues the waiter's fence and publishes
-- '<token> <fence> <deadline> <span>' on the waiter's connection's own channel, so only
-- that waiter's process hears it and only that waiter wakes, and it holds the lease without
-- another round trip. No one can barge in between, the releasing owner included.
--
-- The handed lease lasts until the waiter's deadline (at least ARGV[2]), and at most its
-- TTL. The waiter learned the deadline from the reply to the attempt that set it, which
-- reached the server at deadline - window; span is how long the lease lasts from then.
-- The waiter dates its lease from when it sent that attempt: its view ends before the
-- server's by one network hop, however long it waited. Its first renewal, a third of the
-- way in, gives it its TTL.
-- A waiter that missed the message tries again before its deadline (it tries at least
-- every third of the window) and finds the lease already its own. One that died since its
-- last attempt keeps the lock idle until its deadline, at most a window. A waiter whose
-- deadline passed is skipped. A member not of that form (written by hand) is a bare token,
-- announced on the release channel itself.
--
-- Keys of another type (issue 36): a lock key of another type is refused (refuse_key: the
-- lease is gone, nothing is written). The others are left alone and the release still gives
-- the lease back: a queue or heartbeats of another type hold no waiter, a fence key of another
-- type (or a string that is not a fence) is neither handed on nor dropped. So a release never
-- leaves the lock held because of someone else's key, and costs no command to check them.
-- The holder, and the name's last fence when the release may drop it, in one command (MGET
-- answers nil for a fence key of another type, which is then left alone).
local holder, last
if ARGV[8] == '1' then
  local both = redis.call('MGET', KEYS[1], KEYS[5])
  holder, last = both[1], tonumber(both[2])
end
if not holder then
  -- MGET answers nil for a lock key of another type too: GET fails for it.
  holder = redis.pcall('GET', KEYS[1])
  if type(holder) == 'table' then
    return refuse_key(KEYS[1], nil, 'string')
  end
end
if holder ~= ARGV[1] then
  if ARGV[6] ~= '' then
    local member = ARGV[4] .. ':' .. ARGV[6] .. ':' .. ARGV[1]
    redis.pcall('ZREM', KEYS[3], member)
    redis.pcall('ZREM', KEYS[4], member)
  end
  if holder then
    return -1
  end
  return 0
end
local window = tonumber(ARGV[5])
local now, now_us
while true do
  local head = redis.pcall('ZPOPMIN', KEYS[3])
  if not head[1] then
    break
  end
  if not now then
    now, now_us = now_both()
  end
  local arrival = tonumber(head[2])
  local deadline = math.floor(arrival / 1000) + window
  if arrival ~= math.floor(arrival) then
    -- Marked: it tried again, and its heartbeat entry goes with its place in the queue.
    if deadline <= now then
      local beat = tonumber(redis.pcall('ZSCORE', KEYS[4], head[1]))
      if beat and beat > deadline then
        deadline = beat
      end
    end
    redis.pcall('ZREM', KEYS[4], head[1])
  end
  local channel, ttl, waiter = KEYS[2], nil, head[1]
  local id, t, token = string.match(head[1], '^([^:]*):(%d+):(.*)$')
  if id then
    channel, ttl, waiter = KEYS[2] .. ':' .. id, tonumber(t), token
  end
  if waiter ~= ARGV[1] and deadline > now then
    local reserve = math.max(deadline - now, tonumber(ARGV[2]))
    if ttl and ttl < reserve then
      reserve = ttl
    end
    local fence = handed_fence(KEYS[5], reserve, now_us)
    if fence then
      redis.call('SET', KEYS[1], waiter, 'PX', string.format('%d', reserve))
      local span = now + reserve - (deadline - window)
      publish(ARGV[7], channel, string.format('%s %d %d %d', waiter, fence, deadline, span))
      return 1
    end
    -- The fence key holds something else: no hand-off; the lease is freed below, and the
    -- waiter, woken, tries again and is told by its own attempt.
    publish(ARGV[7], channel, waiter)
    break
  end
end
-- Free. The name's last fence lives no longer than its lease (unless the client keeps
-- fences longer, ARGV[8] ~= '1'), so a name used once leaves nothing behind; a fence ahead
-- of the clock (it stepped back) is kept until the clock passes it (prelude.lua).
local dropped = false
if last then
  local _, now_us = now_both()
  if last < now_us then
    redis.call('DEL', KEYS[1], KEYS[5])
    dropped = true
  end
end
if not dropped then
  redis.call('DEL', KEYS[1])
end
if ARGV[3] == '1' then
  publish(ARGV[7], KEYS[2], '')
end
return 1
