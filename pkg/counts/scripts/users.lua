-- users.lua: the distinct users of each of some presence channels, as
-- exactlib.lua reads them. Read-only; O(channels) while no reap is under
-- way, else O(members * reaps) per channel, members bounded by each
-- channel's member cap.
-- KEYS[1..#ARGV] the channels' members HASHes, then the reaps and their
-- reaping hashes (exactlib.lua)
-- ARGV the channels
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else each channel's users.
-- uses: exact
local hs, ids = reaping(#ARGV + 1)
if not hs then return {STATUS_REAPS, ids} end
local out = {}
for i, ch in ipairs(ARGV) do out[i] = user_count(hs, KEYS[i], ch) end
return out
