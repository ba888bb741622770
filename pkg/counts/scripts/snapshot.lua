-- snapshot.lua: the frozen channel names a paging walk reads, reused by
-- every walk that starts while it is young, so walks cost one O(n) copy per
-- reuse window at most, not one each.
-- KEYS[1] global   ZSET channel -> count
-- KEYS[2] current  STRING id of the snapshot new walks reuse, PX reuse
-- KEYS[3] new      the snapshot key for ARGV[1]
-- ARGV[1] new id, ARGV[2] idle ttl ms, ARGV[3] reuse window ms,
-- ARGV[4] snapshot key prefix (+ id = a snapshot key; same slot)
-- Returns the snapshot id, or '' when the app has no occupied channel.
local id = redis.call('GET', KEYS[2])
if id and redis.call('PEXPIRE', ARGV[4] .. id, ARGV[2]) == 1 then
  return id
end
-- WEIGHTS 0 makes every score 0, so the copy is ordered by name (BYLEX).
if redis.call('ZUNIONSTORE', KEYS[3], 1, KEYS[1], 'WEIGHTS', 0) == 0 then
  return ''
end
redis.call('PEXPIRE', KEYS[3], ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return ARGV[1]
