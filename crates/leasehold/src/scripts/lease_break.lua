-- lease_break.lua: an operator breaks a stuck reentrant lock, RwLock or semaphore, in two
-- calls: the first reads the live holds and changes nothing; the second removes those of them
-- it names that are still live, whatever their owner, and wakes the waiters. The second call
-- names exactly what it breaks, as a release names its token, so it is safe to run twice: a
-- cluster driver re-sends a call whose connection dropped before the reply, and the second
-- run finds none of the holds it names, so a holder that came after the first run is left
-- alone. A hold taken between the two calls is not broken either.
-- This breaks mutual exclusion for the holders; their clients are told by the caller
-- (Client::break_lease publishes the holds broken). (A lease lock is broken by
-- lock_release.lua with its holder's token, which hands it to the next waiter; this script
-- leaves a string key alone.) The fence key is not touched: it keeps its expiry, so status
-- still shows the last fence and the next one is issued above it.
-- KEYS[1] lock key   KEYS[2] release channel   KEYS[3] fence key
-- ARGV[1] '1' to publish by SPUBLISH (see publish in prelude.lua)
-- ARGV[2] '' to read; else the kind the read answered ('reentrant', 'rwlock', 'semaphore'),
--         and ARGV[3..] the holds to break as the read named them: a reentrant lock's owner
--         and its fence (a new acquisition of the free lock has a new fence); members of an
--         RwLock or a semaphore (each acquisition's hold id is new)
-- Returns {kind, holds, last fence or false}: kind 'reentrant', 'rwlock', 'semaphore', 'lock'
-- (a string key, left alone) or 'none' (no key); holds the live holds read, or those removed:
-- {{member or owner id, ms left, count, fence, {hold ids}}, ...}: a reentrant lock's owner
-- once, with its number of holds, its fence and the ids of its holds; an RwLock's read and
-- write holds, '<r|w>:<hold id>:<owner>', its waiting writers neither read nor removed; a
-- semaphore's permits, '<permits>:<hold id>'; for these the fence is '' and the hold id is the
-- member, as each guard's lease knows it. Nothing live removed: nothing is changed or
-- published.
local refused = foreign_keys({{1, 'lease'}, {3, 'string', FENCE}})
if refused then
  return refused
end
local key = KEYS[1]
local fence = redis.call('GET', KEYS[3])
local stored = redis.call('TYPE', key)['ok']
local now = now_ms()
local breaks = ARGV[2] ~= ''
if stored == 'string' then
  return {'lock', {}, fence}
end
if stored == 'hash' then
  local owner = redis.call('HGET', key, 'owner')
  local live = owner and live_holds(key, now, false) or 0
  if live == 0 then
    return {'reentrant', {}, fence}
  end
  local tenure = redis.call('HGET', key, 'fence') or ''
  if breaks and (ARGV[2] ~= 'reentrant' or owner ~= ARGV[3] or tenure ~= ARGV[4]) then
    return {'reentrant', {}, fence}
  end
  local ids = {}
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if string.sub(field, 1, 2) == 'h:' and hold_live(redis.call('HGET', key, field), now) then
      ids[#ids + 1] = string.sub(field, 3)
    end
  end
  local held = {{owner, redis.call('PTTL', key), live, tenure, ids}}
  if breaks then
    redis.call('DEL', key)
    publish(ARGV[1], KEYS[2], '')
  end
  return {'reentrant', held, fence}
end
if stored ~= 'zset' then
  return {'none', {}, fence}
end
local first = redis.call('ZRANGE', key, 0, 0)[1]
local kind = 'semaphore'
if first and string.find(first, '^[rwi]:[^:]*:') then
  kind = 'rwlock'
end
-- A waiting writer is a live waiter, not a hold: it stays and goes first.
local function is_hold(member)
  return kind == 'semaphore' or string.sub(member, 1, 1) ~= 'i'
end
local held = {}
if not breaks then
  local live = redis.call('ZRANGE', key, '(' .. now, '+inf', 'BYSCORE', 'WITHSCORES')
  for i = 1, #live, 2 do
    if is_hold(live[i]) then
      held[#held + 1] = {live[i], tonumber(live[i + 1]) - now, 1, '', {live[i]}}
    end
  end
  return {kind, held, fence}
end
if ARGV[2] ~= kind then
  return {kind, {}, fence}
end
for i = 3, #ARGV do
  local member = ARGV[i]
  local score = tonumber(redis.call('ZSCORE', key, member))
  if score and score > now and is_hold(member) then
    redis.call('ZREM', key, member)
    held[#held + 1] = {member, score - now, 1, '', {member}}
  end
end
if #held == 0 then
  return {kind, held, fence}
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
-- Every waiter of this client may proceed: more than one permit or read may have freed.
publish(ARGV[1], KEYS[2], 'all')
local top = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
if top[1] then
  redis.call('PEXPIRE', key, math.max(1, tonumber(top[2]) - now))
end
return {kind, held, fence}
