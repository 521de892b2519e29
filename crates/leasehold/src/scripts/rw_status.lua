-- rw_status.lua: read the live entries of an RwLock without changing anything. Also reads a
-- semaphore (sem_acquire.lua), whose set has the same shape.
-- KEYS[1] rw key (sorted set, see rw_acquire.lua)   KEYS[2] fence key
-- ARGV[1] most entries to list per group
-- Returns {last fence or false, groups}: the live entries (expiry after now; expired ones are
-- skipped, not pruned) grouped by the text before the first ':' of their member (an RwLock's
-- kind 'r', 'w' or 'i'; a semaphore's permits), each group {that text, number of entries,
-- {{rest of the member, ms left}, ...} for its first ARGV[1] entries, soonest expiry first}.
local refused = foreign_keys({{1, 'zset', LEASE_MEMBER}, {2, 'string', FENCE}})
if refused then
  return refused
end
local now = now_ms()
local most = tonumber(ARGV[1])
local fence = redis.call('GET', KEYS[2])
local live = redis.call('ZRANGE', KEYS[1], '(' .. now, '+inf', 'BYSCORE', 'WITHSCORES')
local groups, index = {}, {}
for i = 1, #live, 2 do
  local member = live[i]
  local colon = string.find(member, ':', 1, true) or (#member + 1)
  local prefix = string.sub(member, 1, colon - 1)
  local group = index[prefix]
  if not group then
    group = {prefix, 0, {}}
    index[prefix] = group
    groups[#groups + 1] = group
  end
  group[2] = group[2] + 1
  if group[2] <= most then
    local entries = group[3]
    entries[#entries + 1] = {string.sub(member, colon + 1), tonumber(live[i + 1]) - now}
  end
end
return {fence, groups}
