-- lock_retake.lua: on one Redlock node, set leases back to their owner where the key is
-- missing: leases a quorum of the other nodes holds right now (it has just renewed them)
-- but this node lost (it restarted without persistence, or its copy expired early).
-- A key that holds another token is never replaced: it may be an attempt that can still
-- win. An attempt's grants are not simultaneous: one granted on this node before the
-- holder's renewal and on others only after the holder's release counts this node from
-- its grant, so replacing its token here (and the holder's release then deleting it)
-- would leave it counting a node that is free (tests/redlock.rs,
-- a_retake_never_replaces_an_attempt_that_can_still_win). A key of another type is never
-- touched either.
-- Sent only on fresh information (the caller's rule, redlock::quorum::retake_in_time): at
-- most half a TTL after the renewal whose quorum it relies on was sent, and
-- while that lease's validity lasts.
-- KEYS[i] lock key of lease i
-- ARGV[2i-1] owner token of lease i   ARGV[2i] its ttl in ms
-- Returns a list with, for each lease: 1 if set back, 0 if left alone (ours already,
-- another token's, or a key of another type).
return each_lease(#KEYS, function(i)
  if redis.call('SET', KEYS[i], ARGV[2 * i - 1], 'NX', 'PX', ARGV[2 * i]) then
    return 1
  end
  return 0
end)
