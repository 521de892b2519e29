-- lock_status.lua: read a lock's state without changing it.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] queue   KEYS[4] heartbeats (see
-- lock_acquire.lua)   ARGV[1] the queue window in ms
-- Returns {holder token or false, pttl of the lease in ms (-2 if none), last fence or false,
-- number of queued waiters whose deadline has not passed}.
local refused = foreign_keys({{1, 'string'}, {2, 'string', FENCE}, {3, 'zset'}, {4, 'zset'}})
if refused then
  return refused
end
local now = now_ms()
local window = tonumber(ARGV[1])
local waiters = 0
local queue = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
for i = 1, #queue, 2 do
  local arrival = tonumber(queue[i + 1])
  if math.floor(arrival / 1000) + window > now then
    waiters = waiters + 1
  elseif arrival ~= math.floor(arrival) then
    -- Marked: it tried again, and its latest deadline counts.
    local beat = tonumber(redis.call('ZSCORE', KEYS[4], queue[i]))
    if beat and beat > now then
      waiters = waiters + 1
    end
  end
end
return {
  redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]),
  waiters,
}
