-- reentrant_status.lua: read a reentrant lock's state without changing anything.
-- KEYS[1] lock key (hash, see reentrant_acquire.lua)   KEYS[2] fence key
-- Returns {owner or false, number of holds, pttl of the lock in ms (-2 if none, -1 if no
-- expiry), fence or false: the owner's while held, else the last one issued, the id of one
-- of the owner's holds or false}.
local owner = redis.call('HGET', KEYS[1], 'owner')
local last = redis.call('GET', KEYS[2])
if not owner then
  return {false, 0, redis.call('PTTL', KEYS[1]), last, false}
end
-- The hash keeps 'owner' and 'fence' besides one field 'h:<hold id>' per hold.
local fields = redis.call('HKEYS', KEYS[1])
local hold = false
for _, field in ipairs(fields) do
  if string.sub(field, 1, 2) == 'h:' then
    hold = string.sub(field, 3)
    break
  end
end
return {
  owner,
  #fields - 2,
  redis.call('PTTL', KEYS[1]),
  redis.call('HGET', KEYS[1], 'fence'),
  hold,
}
