-- rw_downgrade.lua: turn a write hold into a read hold in one step, so no writer slips in.
-- KEYS[1] rw key (sorted set, see rw_acquire.lua)   KEYS[2] release channel
-- ARGV[1] member of the write hold   ARGV[2] member of the new read hold   ARGV[3] ttl in ms
-- ARGV[4] '1' to publish by SPUBLISH (see publish in prelude.lua)
-- Returns 1 if done, 0 if the write hold was missing or expired (nothing is changed).
-- Publishes 'all' so waiting readers enter.
-- Safe to run twice (a cluster driver re-sends a call whose connection dropped before the
-- reply): the read hold's member is new to each downgrade, so finding it live means this
-- call has already done it.
local refused = foreign_keys({{1, 'zset', LEASE_MEMBER}})
if refused then
  return refused
end
local key = KEYS[1]
local now = now_ms()
local done = redis.call('ZSCORE', key, ARGV[2])
if done and tonumber(done) > now then
  return 1
end
local score = redis.call('ZSCORE', key, ARGV[1])
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZREM', key, ARGV[1])
redis.call('ZADD', key, now + tonumber(ARGV[3]), ARGV[2])
pexpire_gt(key, ARGV[3])
publish(ARGV[4], KEYS[2], 'all')
return 1
