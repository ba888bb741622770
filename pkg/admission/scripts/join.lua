-- join.lua: the WebSocket gate, before a presence subscription is counted.
-- ARGV[1] user, ARGV[2] capacity rule, ARGV[4] grace ms. A member (another
-- socket of the same user), a user whose seat a subscribe holds already or
-- the holder of an unexpired slot may join. The seat is then held for the
-- grace (see lib.lua): the node records the new member within that time,
-- and until then nothing (a DELETE, the member's other sockets leaving
-- elsewhere, an expiry) can give the seat to someone else. Returns {ok,
-- reentry, position, waiting}: reentry 1 when a leaver came back within
-- the grace; position 0 when the user is not on the list.
local user, grace = ARGV[1], tonumber(ARGV[4])
local cap = capacity(ARGV[2])
if cap <= 0 then return {1, 0, 0, 0} end
local now = now_ms()
local exp = tonumber(redis.call('ZSCORE', K.slots, user) or 0)
local slot = exp > now
if not (slot or is_member(user) or is_held(user, now)) then
  local rank = redis.call('ZRANK', K.wait, user)
  return {0, 0, rank and rank + 1 or 0, redis.call('ZCARD', K.wait)}
end
hold(user, now + grace)
local reentry = 0
if slot then
  -- The slot lasts as long as the hold, then (a member's) is renewed by
  -- sweep; so the member who leaves keeps it for the grace.
  redis.call('ZADD', K.slots, math.max(exp, now + grace), user)
  reentry = redis.call('SREM', K.grace, user)
end
return {1, reentry, 0, 0}
