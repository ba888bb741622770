-- are_members.lua: whether each of some users is a member of a channel,
-- as exactlib.lua reads it. Read-only; O(users * (1 + reaps under way)).
-- KEYS[1] members HASH user -> sockets, KEYS[2..] the reaps and their
-- reaping hashes (exactlib.lua)
-- ARGV[1] channel, ARGV[2..] users
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else 1 or 0 per user.
local hs, ids = reaping(2)
if not hs then return {STATUS_REAPS, ids} end
local users = {unpack(ARGV, 2)}
local left = live_of(hs, KEYS[1], ARGV[1], users)
local out = {}
for i, u in ipairs(users) do out[i] = left[u] and 1 or 0 end
return out
