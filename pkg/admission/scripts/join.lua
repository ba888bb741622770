-- join.lua: the WebSocket gate, before a presence subscription is counted.
-- ARGV[1] user, ARGV[2] capacity rule, ARGV[4] grace ms. A member (another
-- socket of the same user) or the holder of an unexpired slot may join; the
-- slot is then kept at least a grace, so it outlives the moment until the
-- node's count of the new member lands in Redis. Returns {ok, reentry,
-- position, waiting}: reentry 1 when a leaver came back within the grace;
-- position 0 when the user is not on the list.
local user, grace = ARGV[1], tonumber(ARGV[4])
local cap = capacity(ARGV[2])
if cap <= 0 or is_member(user) then return {1, 0, 0, 0} end
local now = now_ms()
local exp = tonumber(redis.call('ZSCORE', K.slots, user) or 0)
if exp > now then
  redis.call('ZADD', K.slots, math.max(exp, now + grace), user)
  return {1, redis.call('SREM', K.grace, user), 0, 0}
end
local rank = redis.call('ZRANK', K.wait, user)
return {0, 0, rank and rank + 1 or 0, redis.call('ZCARD', K.wait)}
