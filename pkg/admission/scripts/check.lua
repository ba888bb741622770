-- check.lua: POST .../admission, also the check-in. KEYS, ARGV as lib.lua
-- says. Returns {status, n, waiting, capacity, occupancy, promoted,
-- dropped, freed}: status UNLIMITED (no waiting list: no capacity, or the
-- member limit alone, which the subscribe enforces), ADMITTED (holds a
-- slot: n = ms until it expires unless used), ADMITTED_NOW (admitted just
-- now, without waiting) or WAITING (n = position, 1 for the head).
-- uses: exact, now_ms, status, lib
local user, ticket, grace, dropout = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local cap, listed = seats()
if not listed then return {UNLIMITED, 0, 0, 0, 0, {}, {}, {}} end
local now = now_ms()
local occ, promoted, dropped, freed = settle(now, cap, ticket, grace, dropout)
local exp = redis.call('ZSCORE', K.slots, user)
if exp or is_member(user) or is_held(user, now) then
  -- A member without a slot (joined before the limit was set, or gave it
  -- up with DELETE), or a user whose subscribe is being recorded, is
  -- counted already; the slot only tracks them from now on.
  local e = math.max(tonumber(exp or 0), now + ticket)
  redis.call('ZADD', K.slots, e, user)
  return {ADMITTED, e - now, redis.call('ZCARD', K.wait), cap, occ, promoted, dropped, freed}
end
local rank = redis.call('ZRANK', K.wait, user)
if not rank then
  if occ < cap and incomplete(now) <= 0 then
    -- settle admitted the head while there was room, so the list is empty:
    -- nobody is ahead of this newcomer.
    redis.call('ZADD', K.slots, now + ticket, user)
    return {ADMITTED_NOW, ticket, 0, cap, occ + 1, promoted, dropped, freed}
  end
  redis.call('ZADD', K.wait, redis.call('INCR', K.seq), user)
  rank = redis.call('ZCARD', K.wait) - 1
end
redis.call('ZADD', K.seen, now, user)
return {WAITING, rank + 1, redis.call('ZCARD', K.wait), cap, occ, promoted, dropped, freed}
