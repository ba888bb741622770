-- are_members.lua: whether each of some users is a member of a channel,
-- as exactlib.lua reads it. Read-only; O(users * (1 + reaps under way)).
-- KEYS[1] members HASH user -> sockets, KEYS[2..] the reaps and their
-- reaping hashes (exactlib.lua)
-- ARGV[1] channel, ARGV[2..] users
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else 1 or 0 per user.
local hs, ids = reaping(2)
if not hs then return {STATUS_REAPS, ids} end
local users = {unpack(ARGV, 2)}
local socks = redis.call('HMGET', KEYS[1], unpack(users))
local kv = {}
for i, u in ipairs(users) do
  if socks[i] then
    kv[#kv + 1] = u
    kv[#kv + 1] = socks[i]
  end
end
local left = {}
kv = live(hs, kv, member_field(ARGV[1]))
for i = 1, #kv, 2 do left[kv[i]] = true end
local out = {}
for i, u in ipairs(users) do out[i] = left[u] and 1 or 0 end
return out
