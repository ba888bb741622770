-- members.lua: a presence channel's members with their user_info, as
-- exactlib.lua reads them (users whose sockets all sit on reaps under way
-- are left out). Read-only; O(members * (1 + reaps under way)), members
-- bounded by the channel's member cap.
-- KEYS[1] members HASH user -> sockets, KEYS[2] info HASH user ->
-- user_info, KEYS[3..] the reaps and their reaping hashes (exactlib.lua)
-- ARGV[1] channel
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else {user, user_info or
-- '', ...}.
-- uses: exact
local hs, ids = reaping(3)
if not hs then return {STATUS_REAPS, ids} end
local users = live_members(hs, KEYS[1], ARGV[1])
local out = {}
if #users > 0 then
  local names = {}
  for i = 1, #users, 2 do names[#names + 1] = users[i] end
  local infos = redis.call('HMGET', KEYS[2], unpack(names))
  for i, u in ipairs(names) do
    out[#out + 1] = u
    out[#out + 1] = infos[i] or ''
  end
end
return out
