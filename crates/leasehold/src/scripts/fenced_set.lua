-- fenced_set.lua: set a key only if the writer's fence is at least the
-- highest fence seen for it (leasehold::fenced). Stands alone (no prelude):
-- any Redis client may send it as it is.
-- KEYS[1] the key to write   KEYS[2] the highest fence seen for it (same slot)
-- ARGV[1] the writer's fence: a decimal integer, 0 to 18446744073709551615
-- ARGV[2] the value
-- ARGV[3] optional: expiry of both keys in milliseconds (absent or '' for none)
-- Returns the writer's fence when written (it is then the highest seen);
-- a "STALE" error reply, changing nothing, when a higher fence was seen.
-- A "WRONGTYPE" error reply, changing nothing, when either key holds another type or the fence
-- key a string that is not a fence: '... left untouched: <that key>'.
local fence = ARGV[1]
-- Fences are compared as decimal strings (length, then digits): a Lua
-- number holds integers exactly only up to 2^53.
if not string.match(fence, '^[0-9]+$') or #fence > 20
    or (#fence > 1 and string.sub(fence, 1, 1) == '0')
    or (#fence == 20 and fence > '18446744073709551615') then
  return redis.error_reply('ERR fence must be a decimal integer from 0 to 18446744073709551615 ' ..
    'without leading zeros, got "' .. fence .. '"')
end
local ttl = ARGV[3]
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
    ', the highest seen for this key: a newer lock holder has written it; ' ..
    'this writer lost its lease, so nothing was written')
end
if ttl ~= nil and ttl ~= '' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
  redis.call('SET', KEYS[2], fence, 'PX', ttl)
else
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[2], fence)
end
return fence
