-- counts.lua: a channel's subscription count and, if asked, its distinct
-- users, as exactlib.lua reads them (a publish's info). Read-only; O(1),
-- plus O(reaps under way), and O(members * reaps) for the users while a
-- reap is under way.
-- KEYS[1] global ZSET channel -> count, KEYS[2] members HASH of the
-- channel, KEYS[3..] the reaps and their reaping hashes (exactlib.lua)
-- ARGV[1] channel, ARGV[2] '1': distinct users
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else {count (0: vacant),
-- users (-1 when not asked)}.
-- uses: exact
local hs, ids = reaping(3)
if not hs then return {STATUS_REAPS, ids} end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local count = score and live(hs, {ARGV[1], score}, channel_field)[2] or 0
local users = -1
if ARGV[2] == '1' then users = user_count(hs, KEYS[2], ARGV[1]) end
return {tonumber(count), users}
