-- lock_acquire.lua: take the lease if it is free or already ours (a retry after a lost
-- reply, or a hand-off whose message the caller missed), and issue a fencing token;
-- otherwise, for a caller that will wait, join the queue of waiters.
-- KEYS[1] lock key   KEYS[2] fence key
-- KEYS[3] queue (zset: waiter -> arrival, µs of server time; a waiter is
--         '<connection id>:<ttl in ms>:<token>')
-- KEYS[4] heartbeats (zset: waiter -> deadline, ms of server time; see below)
-- ARGV[1] owner token   ARGV[2] lease ttl in ms   ARGV[3] fence memory in ms: how long the
--         last fence is kept at least (see prelude.lua)
-- ARGV[4] queue window in ms: how long a waiter stays queued without trying again
-- ARGV[5] '0' if the caller does not wait (so it does not queue), '1' if it waits, '3' if it
--         waits and its driver may run this call twice (a cluster client: see below), '2' if it
--         waits and may already be queued (an earlier attempt was refused)
-- ARGV[6] '1' for a fair lock: a free lease goes to the caller only if no live waiter is
--         ahead of it in the queue; waiters past their deadline are pruned first
-- ARGV[7] the caller's connection id: a lease handed to the waiter '<id>:<ttl>:<token>' is
--         announced on '<release channel>:<id>', and lasts at most its ttl (lock_release.lua)
-- Returns {1, fence} when the caller holds the lease now; {0, pttl} when another owner holds
-- it (pttl: the holder's remaining ms, -1 if the key has no expiry), and {0, pttl, deadline}
-- when the caller is queued until deadline (ms of server time: now + the window).
-- A key of another type that the call would write (the lock, the fence, and the queue or
-- heartbeats when it queues or, for a fair lock, reads them) is refused with a WRONGTYPE error
-- naming it (refuse_key in prelude.lua), nothing written; a try that does not queue never
-- touches the queue.
--
-- A waiter's deadline is its arrival + the window, or the last deadline its later attempts
-- (heartbeats) wrote, whichever is later: a first attempt writes only its arrival, so a
-- refused first attempt costs five commands. A waiter has an entry in the heartbeats only
-- while it is queued, and then its arrival is marked: half a µs added to it (an arrival is
-- a whole number of µs otherwise; the order of waiters stays theirs). Whoever takes a
-- marked member out of the queue takes its entry out too, and only a marked one costs a
-- command in the heartbeats: so the heartbeats hold only waiters still queued, however
-- many hand-offs a busy lock sees (a waiter handed the lease before its first deadline
-- left its entry behind, kept by the others' heartbeats, one per hand-off).
-- Fences come from next_fence (prelude.lua), as for every kind of lock: on one server and
-- on each Redlock node alike, so the nodes' fences are comparable.
local member = ARGV[7] .. ':' .. ARGV[2] .. ':' .. ARGV[1]
local window = tonumber(ARGV[4])

-- Whether the queued waiter member (arrival in µs) is still live at now (ms).
local function live(waiter, arrival, now)
  if math.floor(arrival / 1000) + window > now then
    return true
  end
  if arrival == math.floor(arrival) then
    -- Not marked: it never tried again.
    return false
  end
  local beat = tonumber(redis.call('ZSCORE', KEYS[4], waiter))
  return beat ~= nil and beat > now
end

-- How many waiters that are gone one heartbeat takes out of each key at most (see prune).
local PRUNE = 4

-- Takes waiters that are gone (not live at now, ms) out of the queue and the heartbeats: at
-- most PRUNE whose deadline in the heartbeats passed, and at most PRUNE of the oldest in the
-- queue whose deadline passed with no heartbeat left (one that never tried again, or whose
-- heartbeats expired). Run by every heartbeat, the only call that keeps the heartbeats
-- alive (and the queue, with first attempts): a release takes out only the dead waiters
-- ahead of the live one it hands the lease to, so under a long hold (a holder that renews,
-- an election's leader) the dead stayed for as long as anyone else waited (seed 23674).
-- A heartbeat adds at most one entry and takes out up to PRUNE dead ones, so each key holds
-- few more than its live waiters; the work per call is bounded.
local function prune(now)
  local gone = redis.call('ZRANGE', KEYS[4], '-inf', now, 'BYSCORE', 'LIMIT', 0, PRUNE)
  -- Arrivals (µs) whose deadline is past: floor(arrival / 1000) + window <= now.
  local past = '(' .. string.format('%d', (now - window + 1) * 1000)
  local old = redis.call('ZRANGE', KEYS[3], '-inf', past, 'BYSCORE', 'LIMIT', 0, PRUNE,
    'WITHSCORES')
  for i = 1, #old, 2 do
    local arrival = tonumber(old[i + 1])
    if arrival == math.floor(arrival) then
      gone[#gone + 1] = old[i]
    else
      local beat = tonumber(redis.call('ZSCORE', KEYS[4], old[i]))
      if not beat or beat <= now then
        gone[#gone + 1] = old[i]
      end
    end
  end
  if #gone > 0 then
    redis.call('ZREM', KEYS[3], unpack(gone))
    redis.call('ZREM', KEYS[4], unpack(gone))
  end
end

local function refuse()
  local pttl = redis.call('PTTL', KEYS[1])
  if ARGV[5] == '0' then
    return {0, pttl}
  end
  local now, now_us = now_both()
  local deadline = now + window
  if ARGV[5] == '2' then
    -- A heartbeat: its arrival may be older than the window. Its member is marked (see
    -- above) before its deadline is written, so whoever takes it out of the queue takes
    -- the entry out too.
    local arrival = redis.pcall('ZSCORE', KEYS[3], member)
    if type(arrival) == 'table' then
      return refuse_key(KEYS[3], nil, 'zset')
    elseif type(redis.pcall('ZSCORE', KEYS[4], member)) == 'table' then
      return refuse_key(KEYS[4], nil, 'zset')
    end
    arrival = tonumber(arrival)
    if not arrival then
      redis.call('ZADD', KEYS[3], string.format('%d.5', now_us), member)
    elseif arrival == math.floor(arrival) then
      redis.call('ZADD', KEYS[3], 'XX', string.format('%d.5', arrival), member)
    end
    redis.call('PEXPIRE', KEYS[3], window)
    redis.call('ZADD', KEYS[4], string.format('%d', deadline), member)
    redis.call('PEXPIRE', KEYS[4], window)
    prune(now)
  else
    -- Fails on a key of another type before writing anything.
    if type(redis.pcall('ZADD', KEYS[3], 'NX', string.format('%d', now_us), member)) == 'table' then
      return refuse_key(KEYS[3], nil, 'zset')
    end
    redis.call('PEXPIRE', KEYS[3], window)
  end
  return {0, pttl, deadline}
end

if ARGV[6] == '1' and redis.pcall('GET', KEYS[1]) == false then
  local refused = foreign_keys({{3, 'zset'}, {4, 'zset'}})
  if refused then
    return refused
  end
  local now = now_ms()
  while true do
    local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if not head[1] or head[1] == member then
      break
    end
    if live(head[1], tonumber(head[2]), now) then
      return refuse()
    end
    redis.call('ZREM', KEYS[3], head[1])
    if tonumber(head[2]) ~= math.floor(tonumber(head[2])) then
      redis.call('ZREM', KEYS[4], head[1])
    end
  end
end
-- One command on 7.0 (SET .. NX .. GET); on 6.2, SET NX, then GET only when it is taken.
-- A lock key of another type fails SET .. GET (or GET) before anything is written.
local holder
if modern then
  holder = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
elseif not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  holder = redis.pcall('GET', KEYS[1])
end
if type(holder) == 'table' then
  return refuse_key(KEYS[1], nil, 'string')
end
if holder and holder ~= ARGV[1] then
  return refuse()
end
if holder then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local fence, refused = next_fence(KEYS[2], ARGV[3])
if not fence then
  -- The fence key holds something else: leave it alone and undo our SET (in this one
  -- script: no one sees it).
  if not holder then
    redis.call('DEL', KEYS[1])
  end
  return refused
end
-- A queued caller leaves the queue once it holds the lease: a later attempt ('2'), or a
-- first attempt that may have run twice ('3': the cluster driver sends a call again when
-- its connection dropped before the reply, so its first run may have been refused and
-- queued). A first attempt of a client whose driver never sends a call twice ('1': one
-- server, Sentinel) cannot be queued, and an uncontended acquire stays at 9 commands.
-- pcall: a caller cannot be queued in a key of another type, and failing here would leave
-- the lease taken with an error.
if (ARGV[5] == '2' or ARGV[5] == '3') and redis.pcall('ZREM', KEYS[3], member) == 1 then
  redis.pcall('ZREM', KEYS[4], member)
end
return {1, fence}
