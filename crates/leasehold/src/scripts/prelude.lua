-- prelude.lua: shared by every script; build.rs puts at the top of each one the paragraphs
-- (blocks between blank lines: keep one definition's lines together, with no blank line
-- inside) that define a name the script uses, directly or through another (scripts/shake.rs),
-- and tests/scripts.rs runs them so assembled. Every script runs on Redis 6.2
-- (no '#!lua' line): where 7.0 saves a command, the script asks `modern` and takes the 7.0
-- form there and the 6.2 one otherwise.
--
-- Fences: next_fence issues max(last stored + 1, server time in µs) on every acquisition of
-- every kind, and stores it until max(now + memory, the moment the clock passes it).
-- Why fences only grow: a fence is the server time at its issue, or, when the stored one is
-- not behind the clock (the clock stepped back, or one µs saw two acquisitions), the stored
-- one + 1, and such a fence is kept until the clock has passed it. So whenever the stored
-- fence is gone or old (expiry, a restart without persistence, a failover to a replica that
-- missed the last acquisitions), the clock has passed every earlier fence, as long as it did
-- not step back meanwhile: a script takes more than 1 µs, so the time now exceeds every
-- fence issued before. The stored fence covers a clock that steps back by d while it is
-- kept; one that steps back while it is not (no acquisition within the memory before the
-- step) can issue fences up to d lower than earlier ones, and so can a failover to a replica
-- whose clock is behind the old master's.

-- Whether the server has Redis 7.0's commands (SET .. NX .. GET, PEXPIRE .. GT): Redis 7.0+
-- and Valkey set redis.REDIS_VERSION, Redis 6.2 does not.
local modern = redis.REDIS_VERSION ~= nil

-- Keys of another type (issue 36). A key leasehold would write that holds something else (another
-- type, or its own type with content of another shape) is refused before anything is written,
-- and left exactly as it was. The error reply names the key last, after 'left untouched: ', so
-- the Rust side (error.rs) reports that key and no other: 'WRONGTYPE leasehold expected zset
-- but found hash; left untouched: <key>'. found: what the key holds (nil: its TYPE).
local function refuse_key(key, found, wanted)
  found = found or redis.call('TYPE', key)['ok']
  return redis.error_reply('WRONGTYPE leasehold expected ' .. wanted .. ' but found ' .. found ..
    '; left untouched: ' .. key)
end

-- Shapes (the last item of a foreign_keys entry): a fence is a decimal integer; a member of an
-- RwLock's or a semaphore's set starts '<r|w|i|permits>...:'; an election's record
-- '<term> <token> '.
local FENCE = '^%d+$'
local LEASE_MEMBER = '^[%drwi][^:]*:'
local RECORD = '^%d+ %S+ '

-- Checks keys before a script writes: entries {i, type[, shape]}, for KEYS[i] (skipped when the
-- call passed no such key), which may be missing or hold type; with shape, a string's value
-- and a sorted set's first member must match the pattern shape, and a hash must have the field
-- shape. Type 'lease' is any kind's lock key: a string, a hash with an 'owner', or a sorted set
-- of LEASE_MEMBERs. Returns nil when every key fits, else the refusal (refuse_key) of the
-- first that does not, to be returned at once. One TYPE per key, one more read per shape.
local function foreign_keys(entries)
  for _, entry in ipairs(entries) do
    local key, wanted, shape = KEYS[entry[1]], entry[2], entry[3]
    if key then
      local found = redis.call('TYPE', key)['ok']
      if wanted == 'lease' and found ~= 'none' then
        wanted = found
        shape = ({string = false, hash = 'owner', zset = LEASE_MEMBER})[found]
        if shape == nil then
          return refuse_key(key, found, 'a string, hash or zset')
        end
      end
      if found ~= 'none' and found ~= wanted then
        return refuse_key(key, found, wanted)
      end
      if shape and found == 'string' then
        if not string.match(redis.call('GET', key), shape) then
          return refuse_key(key, 'a string of another shape', 'a string matching ' .. shape)
        end
      elseif shape and found == 'zset' then
        local first = redis.call('ZRANGE', key, 0, 0)[1]
        if first and not string.match(first, shape) then
          return refuse_key(key, 'a zset of other members', 'members matching ' .. shape)
        end
      elseif shape and found == 'hash' then
        if redis.call('HEXISTS', key, shape) == 0 then
          return refuse_key(key, 'a hash without the field ' .. shape, 'a hash with it')
        end
      end
    end
  end
  return nil
end

-- Sets the expiry of key to ms from now unless it expires later already (PEXPIRE .. GT).
local function pexpire_gt(key, ms)
  if modern then
    redis.call('PEXPIRE', key, ms, 'GT')
  else
    -- -1: no expiry, which GT counts as the latest of all.
    local pttl = redis.call('PTTL', key)
    if pttl ~= -1 and pttl < tonumber(ms) then
      redis.call('PEXPIRE', key, ms)
    end
  end
end

-- The server time: {ms, µs}.
local function now_both()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- The server time in ms.
local function now_ms()
  return (now_both())
end

-- Reentrant holds: field 'h:<hold id>' of the lock's hash holds the hold's own expiry (server
-- time in ms), so a hold that is not renewed (its process crashed) ends on its own even while
-- the same owner's other holds keep the key alive. A value below this (an earlier version's
-- '1') has no expiry of its own: it lives as long as the key.
local LEGACY_HOLD = 100000000000

-- Whether a hold whose field holds value is live at now (ms).
local function hold_live(value, now)
  local at = tonumber(value)
  return at ~= nil and (at < LEGACY_HOLD or at > now)
end

-- Deletes the holds of the reentrant lock at key that ended before now (ms) if prune, and
-- returns how many are live. (HKEYS and HGET: the commands a lock user may already run.)
local function live_holds(key, now, prune)
  local live, ended = 0, {}
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if string.sub(field, 1, 2) == 'h:' then
      if hold_live(redis.call('HGET', key, field), now) then
        live = live + 1
      else
        ended[#ended + 1] = field
      end
    end
  end
  if prune and #ended > 0 then
    redis.call('HDEL', key, unpack(ended))
  end
  return live
end

-- The next fence of the name whose fence key is fence_key, kept at least memory_ms (a
-- positive integer) from now_ms; now_ms and now_us are the server time (now_both()).
-- Returns the fence, or nil and the error reply when the fence key holds another type or a
-- string that is not a fence (then nothing is written: refuse_key).
local function next_fence_at(fence_key, memory_ms, now_ms, now_us)
  local keep = now_ms + tonumber(memory_ms)
  -- One command when the name has no fence (a name used once, or freed by a release): SET NX
  -- writes only where nothing is, and fails on a key of another type (7.0: with GET, before
  -- writing; 6.2: NX finds it taken, and the GET below fails).
  local last
  if modern then
    last = redis.pcall('SET', fence_key, string.format('%d', now_us), 'PXAT',
      string.format('%d', keep), 'NX', 'GET')
    if last == false then
      return now_us
    end
  else
    if redis.pcall('SET', fence_key, string.format('%d', now_us), 'PXAT',
        string.format('%d', keep), 'NX') then
      return now_us
    end
    last = redis.pcall('GET', fence_key)
  end
  if type(last) == 'table' then
    return nil, refuse_key(fence_key, nil, 'string')
  end
  if not string.match(last, FENCE) then
    return nil, refuse_key(fence_key, 'a string that is not a fence', 'a decimal fence')
  end
  last = tonumber(last)
  local fence = math.max(last + 1, now_us)
  -- A fence ahead of the clock (it stepped back, or one µs saw two fences) is kept until the
  -- clock passes it.
  redis.call('SET', fence_key, string.format('%d', fence), 'PXAT',
    string.format('%d', math.max(keep, math.floor(fence / 1000) + 1)))
  return fence
end

-- next_fence_at, at the server time now.
local function next_fence(fence_key, memory_ms)
  local now_ms, now_us = now_both()
  return next_fence_at(fence_key, memory_ms, now_ms, now_us)
end

-- The fence of a lease handed to a waiter at release (lock_release.lua), at the server time
-- now_us. As next_fence_at, except that it keeps the fence key's expiry, set by the last
-- acquisition that was not a hand-off (its TTL or fence memory from then): hand-offs follow
-- each other within moments, and keeping the expiry costs no command. A fence key that was
-- gone is kept keep_ms. Returns as next_fence_at; a string there that is not a fence is put
-- back as it was (KEEPTTL kept its expiry), in the same script: no one sees the change.
local function handed_fence(fence_key, keep_ms, now_us)
  local last = redis.pcall('SET', fence_key, string.format('%d', now_us), 'KEEPTTL', 'GET')
  if type(last) == 'table' then
    return nil, refuse_key(fence_key, nil, 'string')
  end
  if not last then
    redis.call('PEXPIRE', fence_key, keep_ms)
    return now_us
  end
  if not string.match(last, FENCE) then
    redis.call('SET', fence_key, last, 'KEEPTTL')
    return nil, refuse_key(fence_key, 'a string that is not a fence', 'a decimal fence')
  end
  last = tonumber(last)
  if last < now_us then
    return now_us
  end
  local fence = last + 1
  redis.call('SET', fence_key, string.format('%d', fence), 'PXAT',
    string.format('%d', math.floor(fence / 1000) + 1 + keep_ms))
  return fence
end

-- Publishes message on channel: by SPUBLISH when sharded is '1' (a cluster whose servers have
-- it: only the channel's shard hears it), else by PUBLISH (one server, Sentinel, Redlock, or a
-- cluster without sharded pub/sub, which forwards it to every node).
local function publish(sharded, channel, message)
  if sharded == '1' then
    return redis.call('SPUBLISH', channel, message)
  end
  return redis.call('PUBLISH', channel, message)
end

-- A batched call (the watchdog's renewals): answer(i) for each lease i = 1..n, as one list.
-- One odd key must not fail the others in the batch: answers read keys with redis.pcall and
-- answer -1 for a key of another type, which they leave alone.
local function each_lease(n, answer)
  local out = {}
  for i = 1, n do
    out[i] = answer(i)
  end
  return out
end

-- Whether token holds the lock key (a string lease): 1 it does, 0 the key is missing, -1
-- another owner holds it or the key holds another type.
local function holder_check(key, token)
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' then
    return -1
  elseif holder == token then
    return 1
  elseif holder then
    return -1
  end
  return 0
end

-- Drops the name's last fence when its lock is freed by a release: it lives no longer than
-- the lease (unless the client keeps fences longer, and then the caller does not call this),
-- so a name used once leaves nothing behind. A fence ahead of the clock (it stepped back)
-- is kept until the clock passes it (its expiry says so, see next_fence_at).
local function drop_fence(fence_key)
  local _, now_us = now_both()
  local last = tonumber(redis.pcall('GET', fence_key))
  if last and last < now_us then
    redis.call('DEL', fence_key)
  end
end
