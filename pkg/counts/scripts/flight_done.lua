-- flight_done.lua: publish a computed listing (or give up) and release the
-- lock if this caller still holds it; a lock that expired and was taken by
-- another caller is left alone.
-- KEYS[1] cache, KEYS[2] lock
-- ARGV[1] token, ARGV[2] value ('' publishes nothing), ARGV[3] cache ttl ms
-- uses: none
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
return 1
