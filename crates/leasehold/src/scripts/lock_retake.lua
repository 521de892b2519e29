-- lock_retake.lua: on one Redlock node, take back leases that a quorum of the other nodes
-- still holds but this node lost (it restarted without persistence, or its copy expired
-- early), where the key is free. Never touches a key that exists, whatever it holds.
-- KEYS[i] lock key of lease i
-- ARGV[2i-1] owner token of lease i   ARGV[2i] its ttl in ms
-- Returns a list with, for each lease: 1 if taken back, 0 if the key exists (left alone).
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[2 * i - 1], 'NX', 'PX', ARGV[2 * i]) then
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
