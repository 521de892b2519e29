-- rw_release.lua: remove one entry (a read or write hold, or a waiting writer) and wake waiters.
-- Also gives back a semaphore's permit (sem_acquire.lua), whose set has the same shape.
-- KEYS[1] rw key (sorted set, see rw_acquire.lua)   KEYS[2] release channel
-- KEYS[3] fence key   KEYS[4] an RwLock's writers key (rw_acquire.lua; a semaphore has none)
-- ARGV[1] member   ARGV[2] the payload to publish (optional; default 'all')
-- ARGV[3] '1' to publish by SPUBLISH (see publish in prelude.lua)
-- ARGV[4] '1' to drop the name's last fence when this frees the lock (drop_fence)
-- Returns 1 if the entry was live and is removed, 0 if it was missing or expired.
-- A waiting writer's entry ('i:<hold id>:<owner>') gives up its place in the writers key too.
-- Publishes 'all' for an RwLock: every waiter may proceed (many readers can enter at once);
-- a semaphore passes '' (one permit frees, so one waiter per client wakes).
local refused = foreign_keys({{1, 'zset', LEASE_MEMBER}})
if refused then
  return refused
end
local key, queue = KEYS[1], KEYS[4]
-- A writers key of another type is another program's: the release still gives the lease
-- back, and leaves that key alone.
if queue then
  local found = redis.call('TYPE', queue)['ok']
  if found ~= 'zset' and found ~= 'none' then
    queue = nil
  end
end
local now = now_ms()
local score = redis.call('ZSCORE', key, ARGV[1])
local expired = redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local released = 0
if score and tonumber(score) > now then
  redis.call('ZREM', key, ARGV[1])
  publish(ARGV[3], KEYS[2], ARGV[2] or 'all')
  released = 1
end
if queue and string.sub(ARGV[1], 1, 2) == 'i:' then
  redis.call('ZREM', queue, string.sub(ARGV[1], 3))
end
local top = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
if top[1] then
  -- Only when this call removed a member: a call that changed nothing (run again after its
  -- hold went, as a cluster driver's re-send is) leaves the expiry as it was, instead of
  -- setting it again from a clock read a millisecond apart from PEXPIRE's.
  if released == 1 or expired > 0 then
    local left = math.max(1, tonumber(top[2]) - now)
    redis.call('PEXPIRE', key, left)
    if queue then
      redis.call('PEXPIRE', queue, left)
    end
  end
else
  if queue then
    redis.call('DEL', queue)
  end
  if released == 1 and ARGV[4] == '1' and KEYS[3] then
    drop_fence(KEYS[3])
  end
end
return released
