-- state.lua: GET .../admission, and the settling after a capacity change.
-- KEYS, ARGV as lib.lua says, ARGV[1] unused. Returns {capacity, occupancy,
-- waiting, promoted, dropped, freed}; capacity 0 for a channel without a
-- waiting list.
-- uses: exact, now_ms, status, lib
local ticket, grace, dropout = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local cap, listed = seats()
if not listed then return {0, 0, 0, {}, {}, {}} end
local occ, promoted, dropped, freed = settle(now_ms(), cap, ticket, grace, dropout)
return {cap, occ, redis.call('ZCARD', K.wait), promoted, dropped, freed}
