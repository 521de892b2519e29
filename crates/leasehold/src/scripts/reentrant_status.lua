-- reentrant_status.lua: read a reentrant lock's state without changing anything.
-- KEYS[1] lock key (hash, see reentrant_acquire.lua)   KEYS[2] fence key
-- Returns {owner or false, number of holds, pttl of the lock in ms (-2 if none, -1 if no
-- expiry), fence or false: the owner's while held, else the last one issued}.
local owner = redis.call('HGET', KEYS[1], 'owner')
local last = redis.call('GET', KEYS[2])
if not owner then
  return {false, 0, redis.call('PTTL', KEYS[1]), last}
end
-- The hash keeps 'owner' and 'fence' besides one field per hold.
return {
  owner,
  redis.call('HLEN', KEYS[1]) - 2,
  redis.call('PTTL', KEYS[1]),
  redis.call('HGET', KEYS[1], 'fence'),
}
