-- left.lua: a member's last socket left the channel (cluster-wide); their
-- slot, if they hold one, is kept for the grace from now. ARGV[1] user,
-- ARGV[4] grace ms. Returns 1 if a slot was kept.
local user, grace = ARGV[1], tonumber(ARGV[4])
if is_member(user) or not redis.call('ZSCORE', K.slots, user) then return 0 end
redis.call('ZADD', K.slots, now_ms() + grace, user)
redis.call('SADD', K.grace, user)
return 1
