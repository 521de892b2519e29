-- rw_acquire.lua: take a read or write hold on an RwLock, or register a waiting writer.
-- KEYS[1] rw key (sorted set; member '<kind>:<hold id>:<owner>', score = its expiry in server
-- ms; kind 'r' reader, 'w' writer, 'i' a writer waiting)   KEYS[2] fence key
-- ARGV[1] 'r' or 'w'   ARGV[2] owner id   ARGV[3] hold id   ARGV[4] ttl in ms
-- ARGV[5] fence memory in ms (see prelude.lua)   ARGV[6] '1' if a blocked writer waits (leaves an 'i' entry)
-- Returns {1, fence} when the hold is taken, {0, ms} when blocked (ms: until the first
-- blocking entry expires), {-1, 0} for a write by an owner that holds only reads (an upgrade,
-- refused: two upgrading readers would wait for each other forever), {-2, 0} when the set
-- belongs to another kind of lock (a semaphore's: nothing is written).
-- Holds of the same owner never block each other (reentrancy; a writer may also read). A
-- writer that is blocked leaves an 'i' entry lasting ttl, renewed by its retries: while it
-- lives, owners that hold nothing yet cannot start reading. Every entry expires on its own
-- score; expired ones are pruned here, and the key expires with its last entry.
local refused = foreign_keys({{1, 'zset', LEASE_MEMBER}, {2, 'string', FENCE}})
if refused then
  return refused
end
local key, mode, owner = KEYS[1], ARGV[1], ARGV[2]
local now = now_ms()
local ttl = tonumber(ARGV[4])
-- A semaphore's set has the same type; its members start with a number, not a kind.
local first = redis.call('ZRANGE', key, 0, 0)[1]
if first and not string.find(first, '^[rwi]:[^:]*:') then
  return {-2, 0}
end
-- Fails on a key of another type before anything is written.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local mine_r, mine_w = false, false
local held_until, intent_until = nil, nil
local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  local member, expiry = entries[i], tonumber(entries[i + 1])
  local kind = string.sub(member, 1, 1)
  local rest = string.sub(member, 3)
  local who = string.sub(rest, string.find(rest, ':', 1, true) + 1)
  if who == owner then
    if kind == 'r' then mine_r = true elseif kind == 'w' then mine_w = true end
  elseif kind == 'w' or (kind == 'r' and mode == 'w') then
    held_until = math.min(held_until or expiry, expiry)
  elseif kind == 'i' then
    intent_until = math.min(intent_until or expiry, expiry)
  end
end
if mode == 'w' and mine_r and not mine_w then
  return {-1, 0}
end
local blocked_until = held_until
if mode == 'r' and not mine_r and not mine_w and intent_until then
  blocked_until = math.min(blocked_until or intent_until, intent_until)
end
local function settle()
  local top = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
  if top[1] then
    redis.call('PEXPIRE', key, math.max(1, tonumber(top[2]) - now))
  else
    redis.call('DEL', key)
  end
end
local intent = 'i:' .. ARGV[3] .. ':' .. owner
if blocked_until then
  if mode == 'w' and ARGV[6] == '1' then
    redis.call('ZADD', key, now + ttl, intent)
    settle()
  end
  return {0, math.max(1, blocked_until - now)}
end
local fence, refused = next_fence(KEYS[2], ARGV[5])
if not fence then
  return refused
end
redis.call('ZREM', key, intent)
redis.call('ZADD', key, now + ttl, mode .. ':' .. ARGV[3] .. ':' .. owner)
settle()
return {1, fence}
