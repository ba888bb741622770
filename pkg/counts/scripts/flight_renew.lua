-- flight_renew.lua: extend the listing lock while its holder still computes,
-- only if it still holds it (a lock that expired and was taken by another
-- caller is left alone). Returns 1 if renewed.
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] lock ttl ms
-- uses: none
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
