-- left.lua: a member's last socket left the channel (cluster-wide); their
-- slot, if they hold one, is kept for the grace from now. KEYS as lib.lua
-- says, ARGV[1] user, ARGV[4] grace ms. Returns LEFT_KEPT if a slot was
-- kept, else LEFT_NONE.
-- uses: exact, now_ms, status, lib
local user, grace = ARGV[1], tonumber(ARGV[4])
if is_member(user) or not redis.call('ZSCORE', K.slots, user) then return LEFT_NONE end
redis.call('ZADD', K.slots, now_ms() + grace, user)
redis.call('SADD', K.grace, user)
return LEFT_KEPT
