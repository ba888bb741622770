-- join.lua: the WebSocket gate, before a presence subscription is counted.
-- KEYS, ARGV as lib.lua says. A member (another socket of the same user) or a
-- user whose seat a subscribe holds already may join. On a listed channel
-- so may the holder of an unexpired slot, and nobody else; on a channel
-- with the member limit alone, anyone while a seat is free. The seat is
-- then held for the grace (see lib.lua): the node records the new member
-- within that time, and until then nothing (a DELETE, the member's other
-- sockets leaving elsewhere, an expiry, another user's join) can give the
-- seat to someone else. Returns {ok, reentry, position, waiting}: reentry
-- 1 when a leaver came back within the grace; position 0 when the user is
-- not on the list; waiting JOIN_FULL when a channel without a list is
-- full, and JOIN_INCOMPLETE, with position the ms to wait (0: unknown), when the members may not
-- hold every live node's yet (lib.lua, incomplete): only a member or a
-- held user joins then, since the seat the others want may be a member's
-- whose node has not republished.
-- uses: exact, now_ms, status, lib
local user, grace, dropout = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5])
local cap, listed = seats()
if cap <= 0 then return {1, 0, 0, 0} end
local now = now_ms()
local wait_ms = incomplete(now)
if wait_ms ~= 0 and not (is_member(user) or is_held(user, now)) then
  return {0, 0, math.max(wait_ms, 0), JOIN_INCOMPLETE}
end
if not listed then
  if not (is_member(user) or is_held(user, now)) then
    -- Members alone filling the seats is the common full channel: O(1)
    -- while no reap is under way.
    if members() >= cap then return {0, 0, 0, JOIN_FULL} end
    -- occupancy counts every hold in the key, ended or not: sweep first.
    sweep(now, grace, dropout)
    if occupancy() >= cap then return {0, 0, 0, JOIN_FULL} end
  end
  hold(user, now + grace, grace)
  return {1, 0, 0, 0}
end
local exp = tonumber(redis.call('ZSCORE', K.slots, user) or 0)
local slot = exp > now
if not (slot or is_member(user) or is_held(user, now)) then
  local rank = redis.call('ZRANK', K.wait, user)
  return {0, 0, rank and rank + 1 or 0, redis.call('ZCARD', K.wait)}
end
hold(user, now + grace, grace)
local reentry = 0
if slot then
  -- The slot lasts as long as the hold, then (a member's) is renewed by
  -- sweep; so the member who leaves keeps it for the grace.
  redis.call('ZADD', K.slots, math.max(exp, now + grace), user)
  reentry = redis.call('SREM', K.grace, user)
end
return {1, reentry, 0, 0}
