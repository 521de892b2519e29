-- reentrant_status.lua: read a reentrant lock's state without changing anything.
-- KEYS[1] lock key (hash, see reentrant_acquire.lua)   KEYS[2] fence key
-- Returns {owner or false, number of live holds, pttl of the lock in ms (-2 if none, -1 if no
-- expiry), fence or false: the owner's while held, else the last one issued}. A lock whose
-- holds all ended (see prelude.lua) is reported free.
-- A hash without an owner is no reentrant lock's.
local refused = foreign_keys({{1, 'hash', 'owner'}, {2, 'string', FENCE}})
if refused then
  return refused
end
local owner = redis.call('HGET', KEYS[1], 'owner')
local last = redis.call('GET', KEYS[2])
local live = owner and live_holds(KEYS[1], now_ms(), false) or 0
if live == 0 then
  return {false, 0, redis.call('PTTL', KEYS[1]), last}
end
return {
  owner,
  live,
  redis.call('PTTL', KEYS[1]),
  redis.call('HGET', KEYS[1], 'fence'),
}
