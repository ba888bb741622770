-- waiters.lua: a wsnode checks in for the waiters connected to it (a
-- connected waiter does not drop out) and learns where each stands.
-- KEYS, ARGV as lib.lua says, ARGV[1] unused, ARGV[7..] users. Returns
-- {capacity, occupancy, waiting, promoted, dropped, freed, states}: one
-- state per user: ms until their slot expires as a string ADMITTED .. ms, their
-- position as a number, or 0 when they are on the list no more.
-- uses: exact, now_ms, status, lib
local ticket, grace, dropout = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local cap, listed = seats()
local now = now_ms()
for i = 7, #ARGV do
  if redis.call('ZSCORE', K.wait, ARGV[i]) then redis.call('ZADD', K.seen, now, ARGV[i]) end
end
local occ, promoted, dropped, freed = 0, {}, {}, {}
if listed then occ, promoted, dropped, freed = settle(now, cap, ticket, grace, dropout) else cap = 0 end
local states = {}
for i = 7, #ARGV do
  local u = ARGV[i]
  local exp = tonumber(redis.call('ZSCORE', K.slots, u) or 0)
  if not listed or exp > now or is_member(u) or is_held(u, now) then
    states[#states + 1] = ADMITTED .. math.max(exp - now, 0)
  else
    local rank = redis.call('ZRANK', K.wait, u)
    states[#states + 1] = rank and rank + 1 or 0
  end
end
return {cap, occ, redis.call('ZCARD', K.wait), promoted, dropped, freed, states}
