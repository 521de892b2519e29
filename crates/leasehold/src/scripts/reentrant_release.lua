-- reentrant_release.lua: give back one hold; free the lock and wake waiters when none is left.
-- KEYS[1] lock key (hash)   KEYS[2] release channel   KEYS[3] fence key
-- KEYS[4] (with ARGV[2] = '') the record of this call: its outcome, kept a minute
-- ARGV[1] owner id, or '' to skip the owner check (hold ids are unique)
-- ARGV[2] hold id, or '' for any one hold of the owner, once per call: a cluster driver may run
--         a call twice (it re-sends one whose connection dropped before the reply), and the
--         second run answers what the first did (KEYS[4]) instead of giving back a second hold
-- ARGV[3] '1' to publish by SPUBLISH (see publish in prelude.lua)
-- ARGV[4] '1' to drop the name's last fence when the lock is freed (drop_fence)
-- Returns 1 if a hold was given back, 0 if the lock or that hold is missing (expired or
-- released), -1 if another owner holds it (then nothing is changed but dropping holds that
-- ended). Holds that ended (see prelude.lua) are dropped first; when none is left live the
-- lock is freed as at the last hold.
-- A lock key of another type (or a hash without an owner) is refused; a fence key of another
-- type is left alone (drop_fence).
local refused = foreign_keys({{1, 'hash', 'owner'}, {4, 'string'}})
if refused then
  return refused
end
local record = ARGV[2] == '' and KEYS[4]
if record then
  local done = redis.call('GET', record)
  if done then
    return tonumber(done)
  end
end

local function free()
  redis.call('DEL', KEYS[1])
  if ARGV[4] == '1' and KEYS[3] then
    drop_fence(KEYS[3])
  end
  publish(ARGV[3], KEYS[2], '')
end

local function give_back()
  local holder = redis.call('HGET', KEYS[1], 'owner')
  if not holder then
    return 0
  end
  if live_holds(KEYS[1], now_ms(), true) == 0 then
    free()
    return 0
  end
  if ARGV[1] ~= '' and holder ~= ARGV[1] then
    return -1
  end
  local hold = nil
  if ARGV[2] ~= '' then
    hold = 'h:' .. ARGV[2]
    if redis.call('HEXISTS', KEYS[1], hold) == 0 then
      return 0
    end
  else
    for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
      if string.sub(field, 1, 2) == 'h:' then
        hold = field
        break
      end
    end
    if not hold then
      return 0
    end
  end
  redis.call('HDEL', KEYS[1], hold)
  -- The hash keeps 'owner' and 'fence' besides one field per hold (live ones only now).
  if redis.call('HLEN', KEYS[1]) <= 2 then
    free()
  end
  return 1
end

if ARGV[2] == '' and not record then
  return redis.error_reply('reentrant_release: any one hold needs the record of the call (KEYS[4])')
end
local outcome = give_back()
if record then
  redis.call('SET', record, string.format('%d', outcome), 'PX', 60000)
end
return outcome
