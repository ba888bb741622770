-- state.lua: GET .../admission, and the settling after a capacity change.
-- ARGV[1] unused, ARGV[2..5] as check.lua. Returns {capacity, occupancy,
-- waiting, promoted, dropped, freed}.
local ticket, grace, dropout = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local cap = capacity(ARGV[2])
if cap <= 0 then return {0, 0, 0, {}, {}, {}} end
local occ, promoted, dropped, freed = settle(now_ms(), cap, ticket, grace, dropout)
return {cap, occ, redis.call('ZCARD', K.wait), promoted, dropped, freed}
