-- election_vacate.lua: a leader steps down: drop its record and tell the observers, before
-- its lease is released (lock_release.lua, which may hand it to a standby).
-- KEYS[1] lock key   KEYS[2] leader key   KEYS[3] the election's change channel
-- ARGV[1] the leader's owner token   ARGV[2] '1' to publish by SPUBLISH, else PUBLISH
-- Returns 1 if the caller led (its record is gone), 0 if it did not (nothing is changed).
-- A lock key of another type is refused; a record key of another type is left alone, so a
-- resignation still gives the lease back (lock_release.lua).
local refused = foreign_keys({{1, 'string'}})
if refused then
  return refused
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local record = redis.pcall('GET', KEYS[2])
if type(record) == 'string' and string.match(record, '^%d+ (%S+) ') == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
publish(ARGV[2], KEYS[3], 'all')
return 1
