-- lease_break.lua: an operator breaks a stuck reentrant lock, RwLock or semaphore: every live
-- hold is removed whatever its owner, and the waiters are woken. This breaks mutual exclusion
-- for the holders: each still believes it holds until its next renewal is refused. (A lease
-- lock is broken by lock_release.lua with its holder's token, which hands it to the next
-- waiter; this script leaves a string key alone.) The fence key is not touched: it keeps its
-- expiry, so status still shows the last fence and the next one is issued above it.
-- KEYS[1] lock key   KEYS[2] release channel   KEYS[3] fence key
-- ARGV[1] '1' to publish by SPUBLISH (see publish in prelude.lua)
-- Returns {kind, holds, last fence or false}: kind 'reentrant', 'rwlock', 'semaphore', 'lock' (a string key,
-- left alone) or 'none' (no key); holds {{member or owner id, ms left, count}, ...} of the
-- live holds removed (a reentrant lock's owner once, with its number of holds; an RwLock's
-- read and write holds, '<r|w>:<hold id>:<owner>', its waiting writers kept; a semaphore's
-- permits, '<permits>:<hold id>'). Nothing live removed: nothing is changed or published.
local refused = foreign_keys({{1, 'lease'}, {3, 'string', FENCE}})
if refused then
  return refused
end
local key = KEYS[1]
local fence = redis.call('GET', KEYS[3])
local stored = redis.call('TYPE', key)['ok']
local now = now_ms()
if stored == 'string' then
  return {'lock', {}, fence}
end
if stored == 'hash' then
  local owner = redis.call('HGET', key, 'owner')
  local live = owner and live_holds(key, now, false) or 0
  if live == 0 then
    return {'reentrant', {}, fence}
  end
  local left = redis.call('PTTL', key)
  redis.call('DEL', key)
  publish(ARGV[1], KEYS[2], '')
  return {'reentrant', {{owner, left, live}}, fence}
end
if stored ~= 'zset' then
  return {'none', {}, fence}
end
local first = redis.call('ZRANGE', key, 0, 0)[1]
local kind = 'semaphore'
if first and string.find(first, '^[rwi]:[^:]*:') then
  kind = 'rwlock'
end
local removed = {}
local live = redis.call('ZRANGE', key, '(' .. now, '+inf', 'BYSCORE', 'WITHSCORES')
for i = 1, #live, 2 do
  local member = live[i]
  -- A waiting writer is a live waiter, not a hold: it stays and goes first.
  if kind == 'semaphore' or string.sub(member, 1, 1) ~= 'i' then
    redis.call('ZREM', key, member)
    removed[#removed + 1] = {member, tonumber(live[i + 1]) - now, 1}
  end
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if #removed > 0 then
  -- Every waiter of this client may proceed: more than one permit or read may have freed.
  publish(ARGV[1], KEYS[2], 'all')
end
local top = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
if top[1] then
  redis.call('PEXPIRE', key, math.max(1, tonumber(top[2]) - now))
end
return {kind, removed, fence}
