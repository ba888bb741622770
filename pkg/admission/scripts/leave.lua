-- leave.lua: DELETE .../admission: the user leaves the list, or gives up
-- their slot: an unused ticket, a leaver's grace, or a member's claim to a
-- grace when they leave. It takes no seat from a user in the channel: a
-- member is counted until their last socket leaves, and a subscribe the
-- gate let in keeps its hold until the node has recorded the member (see
-- lib.lua), so occupancy never drops below the users really there. KEYS,
-- ARGV as check.lua. Returns {capacity, occupancy, waiting, promoted, dropped,
-- freed}.
-- uses: exact, now_ms, status, lib
local user, ticket, grace, dropout = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREM', K.slots, user)
redis.call('SREM', K.grace, user)
redis.call('ZREM', K.wait, user)
redis.call('ZREM', K.seen, user)
local cap, listed = seats()
if not listed then return {0, 0, 0, {}, {}, {}} end
local occ, promoted, dropped, freed = settle(now_ms(), cap, ticket, grace, dropout)
return {cap, occ, redis.call('ZCARD', K.wait), promoted, dropped, freed}
