-- rw_acquire.lua: take a read or write hold on an RwLock, or register a waiting writer.
-- KEYS[1] rw key (sorted set; member '<kind>:<hold id>:<owner>', score = its expiry in server
-- ms; kind 'r' reader, 'w' writer, 'i' a writer waiting)   KEYS[2] fence key
-- KEYS[3] writers key (sorted set: member '<hold id>:<owner>' of each waiting writer, score =
-- its arrival, server µs, rising)
-- ARGV[1] 'r' or 'w'   ARGV[2] owner id   ARGV[3] hold id   ARGV[4] ttl in ms
-- ARGV[5] fence memory in ms (see prelude.lua)   ARGV[6] '1' if a blocked writer waits (leaves an 'i' entry)
-- Returns {1, fence} when the hold is taken, {0, ms} when blocked (ms: until the first
-- blocking entry expires), {-1, 0} for a write by an owner that holds only reads (an upgrade,
-- refused: two upgrading readers would wait for each other forever), {-2, 0} when the set
-- belongs to another kind of lock (a semaphore's: nothing is written).
-- Holds of the same owner never block each other (reentrancy; a writer may also read). A
-- writer that is blocked leaves an 'i' entry lasting ttl, renewed by its retries, and takes
-- its place in the writers key at its first such attempt. While a waiting writer lives,
-- owners that hold nothing yet cannot start reading, and no other owner's writer that came
-- later (or only tries) can start writing: writers are served in the order they came. Every
-- entry expires on its own score; expired ones are pruned here, and the keys expire with
-- their last entry.
-- Clients of an earlier version know no writers key: their 'i' entries get a place here
-- when first seen, and their writers do not queue (they take a free lock as they find it).
local refused = foreign_keys({{1, 'zset', LEASE_MEMBER}, {2, 'string', FENCE}, {3, 'zset'}})
if refused then
  return refused
end
local key, queue, mode, owner = KEYS[1], KEYS[3], ARGV[1], ARGV[2]
local now, now_us = now_both()
local ttl = tonumber(ARGV[4])
-- A semaphore's set has the same type; its members start with a number, not a kind.
local first = redis.call('ZRANGE', key, 0, 0)[1]
if first and not string.find(first, '^[rwi]:[^:]*:') then
  return {-2, 0}
end
-- Fails on a key of another type before anything is written.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local me = ARGV[3] .. ':' .. owner
local mine_r, mine_w = false, false
local held_until = nil
-- Every live waiting writer, '<hold id>:<owner>' -> true, in score order as a list too; and
-- other owners' ones -> expiry: those may block this call.
local live_i, live_list, waiting = {}, {}, {}
local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  local member, expiry = entries[i], tonumber(entries[i + 1])
  local kind = string.sub(member, 1, 1)
  local rest = string.sub(member, 3)
  local who = string.sub(rest, string.find(rest, ':', 1, true) + 1)
  if kind == 'i' then
    live_i[rest] = true
    live_list[#live_list + 1] = rest
  end
  if who == owner then
    if kind == 'r' then mine_r = true elseif kind == 'w' then mine_w = true end
  elseif kind == 'w' or (kind == 'r' and mode == 'w') then
    held_until = math.min(held_until or expiry, expiry)
  elseif kind == 'i' then
    waiting[rest] = expiry
  end
end
if mode == 'w' and mine_r and not mine_w then
  return {-1, 0}
end
-- The writers' places in arrival order: those of writers no longer waiting are dropped, and
-- a waiting writer without one (an earlier version's) gets one now.
local touched = false
local places = redis.call('ZRANGE', queue, 0, -1, 'WITHSCORES')
local placed, gone, last = {}, {}, nil
for i = 1, #places, 2 do
  local member, at = places[i], tonumber(places[i + 1])
  last = at
  if live_i[member] then
    placed[member] = at
  else
    gone[#gone + 1] = member
  end
end
if #gone > 0 then
  redis.call('ZREM', queue, unpack(gone))
  touched = true
end
local function place(member)
  last = math.max(now_us, (last or 0) + 1)
  placed[member] = last
  -- Formatted: Lua would print a µs time (16 digits) with 14 significant ones.
  redis.call('ZADD', queue, string.format('%d', last), member)
  touched = true
end
for _, member in ipairs(live_list) do
  if not placed[member] then
    place(member)
  end
end
local blocked_until = held_until
local function blocked_by(expiry)
  blocked_until = math.min(blocked_until or expiry, expiry)
end
if mode == 'r' then
  if not mine_r and not mine_w then
    for _, expiry in pairs(waiting) do
      blocked_by(expiry)
    end
  end
elseif not mine_w then
  -- A writer goes after every other owner's writer that came before it; one without a
  -- place (its first attempt, or one that only tries) after all of them.
  local mine = placed[me]
  for member, expiry in pairs(waiting) do
    if not mine or placed[member] < mine then
      blocked_by(expiry)
    end
  end
end
local function settle()
  local top = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
  if top[1] then
    local left = math.max(1, tonumber(top[2]) - now)
    redis.call('PEXPIRE', key, left)
    redis.call('PEXPIRE', queue, left)
  else
    redis.call('DEL', key, queue)
  end
end
local intent = 'i:' .. me
if blocked_until then
  if mode == 'w' and ARGV[6] == '1' then
    redis.call('ZADD', key, now + ttl, intent)
    if not placed[me] then
      place(me)
    end
    settle()
  elseif touched then
    settle()
  end
  return {0, math.max(1, blocked_until - now)}
end
local fence, refused = next_fence(KEYS[2], ARGV[5])
if not fence then
  return refused
end
redis.call('ZREM', key, intent)
redis.call('ZREM', queue, me)
redis.call('ZADD', key, now + ttl, mode .. ':' .. ARGV[3] .. ':' .. owner)
settle()
return {1, fence}
