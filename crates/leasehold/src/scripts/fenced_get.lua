-- fenced_get.lua: read a key for the holder of a fence, claiming it first: the fence becomes the
-- highest seen for the key (leasehold::fenced), so every later write of a lower fence is refused,
-- also one that a stale holder sends between this read and this holder's write. Stands alone
-- (no prelude): any Redis client may send it as it is (Redis 6.0 or later: KEEPTTL).
-- KEYS[1] the key to read   KEYS[2] the highest fence seen for it (same slot)
-- ARGV[1] the reader's fence: a decimal integer, 0 to 18446744073709551615
-- ARGV[2] optional: how long the claim lasts at least, in milliseconds (absent or '' for no
--         expiry): the fence key expires no sooner, nor sooner than it would have
-- Returns the key's value (nil if it has none) when the fence is at least the highest seen; a
-- "STALE" error reply, changing nothing, when a higher fence was seen.
-- A "WRONGTYPE" error reply, changing nothing, when either key holds another type or the fence
-- key a string that is not a fence: '... left untouched: <that key>'.
local fence = ARGV[1]
-- Compared as decimal strings, as in fenced_set.lua.
if not string.match(fence, '^[0-9]+$') or #fence > 20
    or (#fence > 1 and string.sub(fence, 1, 1) == '0')
    or (#fence == 20 and fence > '18446744073709551615') then
  return redis.error_reply('ERR fence must be a decimal integer from 0 to 18446744073709551615 ' ..
    'without leading zeros, got "' .. fence .. '"')
end
local ttl = ARGV[2]
if ttl ~= nil and ttl ~= '' and not string.match(ttl, '^[1-9][0-9]*$') then
  return redis.error_reply('ERR expiry must be a positive number of milliseconds, got "' .. ttl .. '"')
end
-- A key of another type, or a fence key that holds no fence, is refused before anything is
-- written, naming the key last (as leasehold's own scripts do, see their prelude).
for i = 1, 2 do
  local found = redis.call('TYPE', KEYS[i])['ok']
  local wanted = i == 1 and 'string' or 'a decimal fence'
  if found ~= 'none' and found ~= 'string' then
    return redis.error_reply('WRONGTYPE leasehold expected ' .. wanted .. ' but found ' .. found ..
      '; left untouched: ' .. KEYS[i])
  end
end
local highest = redis.call('GET', KEYS[2])
if highest and not string.match(highest, '^[0-9]+$') then
  return redis.error_reply('WRONGTYPE leasehold expected a decimal fence but found a string ' ..
    'that is not one; left untouched: ' .. KEYS[2])
end
if highest and (#highest > #fence or (#highest == #fence and highest > fence)) then
  return redis.error_reply('STALE fence ' .. fence .. ' is below ' .. highest ..
    ', the highest seen for this key: a newer lock holder has claimed it; ' ..
    'this reader lost its lease')
end
local value = redis.call('GET', KEYS[1])
if ttl == nil or ttl == '' then
  -- No expiry asked: the claim lasts until a higher fence comes.
  redis.call('SET', KEYS[2], fence)
else
  -- -2: no key, -1: no expiry (kept: it already outlasts the claim).
  local left = redis.call('PTTL', KEYS[2])
  if left == -1 or left >= tonumber(ttl) then
    redis.call('SET', KEYS[2], fence, 'KEEPTTL')
  else
    redis.call('SET', KEYS[2], fence, 'PX', ttl)
  end
end
return value
