-- reentrant_release.lua: give back one hold; free the lock and wake waiters when none is left.
-- KEYS[1] lock key (hash)   KEYS[2] release channel   KEYS[3] fence key
-- ARGV[1] owner id, or '' to skip the owner check (hold ids are unique)
-- ARGV[2] hold id. Always one hold by its id, never "any one": a cluster driver may run a
--         call twice (it re-sends one whose connection dropped before the reply), and a
--         second run must not give back a second hold.
-- ARGV[3] '1' to publish by SPUBLISH (see publish in prelude.lua)
-- ARGV[4] '1' to drop the name's last fence when the lock is freed (drop_fence)
-- Returns 1 if a hold was given back, 0 if the lock or that hold is missing (expired or
-- released), -1 if another owner holds it (then nothing is changed).
local holder = redis.call('HGET', KEYS[1], 'owner')
if not holder then
  return 0
end
if ARGV[1] ~= '' and holder ~= ARGV[1] then
  return -1
end
local hold = 'h:' .. ARGV[2]
if redis.call('HEXISTS', KEYS[1], hold) == 0 then
  return 0
end
redis.call('HDEL', KEYS[1], hold)
-- The hash keeps 'owner' and 'fence' besides one field per hold.
if redis.call('HLEN', KEYS[1]) <= 2 then
  redis.call('DEL', KEYS[1])
  if ARGV[4] == '1' and KEYS[3] then
    drop_fence(KEYS[3])
  end
  publish(ARGV[3], KEYS[2], '')
end
return 1
