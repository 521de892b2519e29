-- reentrant_acquire.lua: take the reentrant lock if it is free or already the owner's, adding one hold.
-- KEYS[1] lock key (hash: owner, fence, h:<hold id> per hold: its expiry, see prelude.lua)
-- KEYS[2] fence key
-- ARGV[1] owner id   ARGV[2] hold id (random per acquisition)   ARGV[3] lease ttl in ms
-- ARGV[4] fence memory in ms (see prelude.lua)
-- Returns {1, fence} when the caller holds it now, {0, pttl} when another owner holds it (pttl:
-- the holder's remaining ms, -1 if the key has no expiry).
-- The fence is issued when the owner takes the free lock (as in lock_acquire.lua); re-entries
-- return the same fence. Each hold ends ttl from its last acquisition or renewal; holds that
-- ended are dropped first, and a lock whose holds all ended is free (an owner's crashed
-- process leaves nothing held once its holds end, whatever the owner's other processes do).
-- Adding a hold that exists already only sets its expiry again, so a retry after a lost reply
-- does not count twice. A re-entry never shortens the key's expiry (PEXPIRE GT): the owner's
-- other holds may have asked for longer.
-- A hash without an owner is no reentrant lock's: it is refused, not taken over.
local refused = foreign_keys({{1, 'hash', 'owner'}, {2, 'string', FENCE}})
if refused then
  return refused
end
local now = now_ms()
local holder = redis.call('HGET', KEYS[1], 'owner')
if holder and live_holds(KEYS[1], now, true) == 0 then
  redis.call('DEL', KEYS[1])
  holder = nil
end
if holder and holder ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
local hold = 'h:' .. ARGV[2]
local expiry = string.format('%d', now + tonumber(ARGV[3]))
if holder then
  redis.call('HSET', KEYS[1], hold, expiry)
  pexpire_gt(KEYS[1], ARGV[3])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
end
local fence, refused = next_fence(KEYS[2], ARGV[4])
if not fence then
  return refused
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'fence', string.format('%d', fence), hold, expiry)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, fence}
