-- lock_retake.lua: on one Redlock node, set leases back to their owner: leases a quorum of
-- the other nodes holds right now (it has just renewed them) but this node lost (it
-- restarted without persistence, or its copy expired early) or holds for another token.
-- While a quorum holds the lease, no other token can belong to a holder (no one else can
-- reach a quorum), so another token here is a waiter's attempt that cannot succeed; waiters
-- keep the free nodes busy with such attempts, so only replacing them restores the copy.
-- A key of another type is never touched.
-- Sent only on fresh information (the caller's rule, redlock::quorum::retake_in_time): at
-- most half a TTL after the renewal or acquisition whose quorum it relies on was sent, and
-- while that lease's validity lasts. Later, the lease may have lapsed and been taken by a
-- new holder meanwhile, whose token this script would overwrite: it is then left to the
-- next renewal, which asks the quorum afresh.
-- KEYS[i] lock key of lease i
-- ARGV[2i-1] owner token of lease i   ARGV[2i] its ttl in ms
-- Returns a list with, for each lease: 1 if set back, 0 if left alone (ours already, or a
-- key of another type).
local out = {}
for i, key in ipairs(KEYS) do
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' or holder == ARGV[2 * i - 1] then
    out[i] = 0
  else
    redis.call('SET', key, ARGV[2 * i - 1], 'PX', ARGV[2 * i])
    out[i] = 1
  end
end
return out
