-- election_announce.lua: record the leader's value and term next to the lease it just
-- acquired (or was handed), if it still holds it, and tell the observers.
-- KEYS[1] lock key   KEYS[2] leader key   KEYS[3] the election's change channel
-- ARGV[1] the leader's owner token   ARGV[2] its term (the fence of its acquisition)
-- ARGV[3] its value   ARGV[4] '1' to publish by SPUBLISH, else PUBLISH
-- Returns 1 if recorded, 0 if the lease is no longer the caller's (nothing is written).
--
-- The record is '<term> <token> <value>' and lives exactly as long as the lease: set to the
-- lease's remaining time here, and renewed with it (election_extend.lua). A record is only
-- believed while its token holds the lease (election_leader.lua), so one left by an earlier
-- leader (a hand-off, an expiry) says nothing.
-- A record key holding another type, or a string not of the record's shape, is refused.
local refused = foreign_keys({{1, 'string'}, {2, 'string', RECORD}})
if refused then
  return refused
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. ARGV[1] .. ' ' .. ARGV[3], 'PX', pttl)
publish(ARGV[4], KEYS[3], 'all')
return 1
