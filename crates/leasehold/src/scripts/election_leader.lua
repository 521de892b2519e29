-- election_leader.lua: read who leads an election; changes nothing.
-- KEYS[1] lock key   KEYS[2] leader key (see election_announce.lua)
-- Returns {} when nobody leads (no lease, or its holder has not recorded its value yet),
-- else {value, term, the lease's remaining ms}.
local refused = foreign_keys({{1, 'string'}, {2, 'string'}})
if refused then
  return refused
end
local holder = redis.call('GET', KEYS[1])
if not holder then
  return {}
end
local record = redis.call('GET', KEYS[2])
if not record then
  return {}
end
local term, token, value = string.match(record, '^(%d+) (%S+) (.*)$')
if token ~= holder then
  return {}
end
return {value, term, redis.call('PTTL', KEYS[1])}
