-- election_extend.lua: renew leaderships we still hold, and their leader records with them;
-- one call renews many. As lock_extend.lua, with two keys per lease.
-- KEYS[2i-1] lock key of lease i   KEYS[2i] its leader key (see election_announce.lua)
-- ARGV[2i-1] owner token of lease i   ARGV[2i] new ttl of lease i in ms
-- Returns a list with, for each lease: 1 if extended, 0 if missing, -1 if another owner
-- holds it or the key now holds another type (then it is left alone).
return each_lease(#KEYS / 2, function(i)
  local key, record_key, token = KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1]
  local owned = holder_check(key, token)
  if owned == 1 then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    local record = redis.pcall('GET', record_key)
    if type(record) == 'string' and string.match(record, '^%d+ (%S+) ') == token then
      redis.call('PEXPIRE', record_key, ARGV[2 * i])
    end
  end
  return owned
end)
