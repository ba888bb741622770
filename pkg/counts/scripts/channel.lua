-- channel.lua: one channel's counts and freshness in one atomic read, one
-- command (the hot path of GET /channels/{name}). Read-only; O(log n),
-- plus O(reaps under way), and O(members * reaps) for the users while a
-- reap is under way (see exactlib.lua).
-- KEYS[1] global   ZSET channel -> count
-- KEYS[2] nodes    ZSET node -> last-seen (ms)
-- KEYS[3] members  HASH user -> sockets, of this channel
-- KEYS[4..] the reaps and their reaping hashes (exactlib.lua)
-- ARGV[1] channel, ARGV[2] stale-after ms, ARGV[3] '1': rank,
-- ARGV[4] '1': distinct users
-- Returns {STATUS_REAPS, reaps} (see exactlib.lua), else {freshness (see
-- freshlib.lua), count or false (vacant), rank (0-based, -1 when not asked
-- or vacant), users (-1 when not asked or vacant)}. While a reap is under
-- way the rank is live_rank's (exactlib.lua): O(log^2 n + REAP_WINDOW *
-- reaps^2).
-- uses: now_ms, fresh, exact
local hs, ids = reaping(4)
if not hs then return {STATUS_REAPS, ids} end
local f = freshness(KEYS[2], ARGV[2])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local count = score and live(hs, {ARGV[1], score}, channel_field)[2]
local rank, users = -1, -1
if count then
  if ARGV[3] == '1' then
    rank = live_rank(hs, KEYS[1], ARGV[1], tonumber(count), tonumber(score))
  end
  if ARGV[4] == '1' then
    users = user_count(hs, KEYS[3], ARGV[1])
  end
end
return {f, count or false, rank, users}
