-- channel.lua: one channel's counts and freshness in one atomic read, one
-- command (the hot path of GET /channels/{name}). Read-only; O(log n).
-- KEYS[1] global   ZSET channel -> count
-- KEYS[2] nodes    ZSET node -> last-seen (ms)
-- KEYS[3] members  HASH user -> sockets, of this channel
-- ARGV[1] channel, ARGV[2] stale-after ms, ARGV[3] '1': rank,
-- ARGV[4] '1': distinct users
-- Returns {freshness (see freshlib.lua), count or false, rank (0-based, -1
-- when not asked or vacant), users (-1 when not asked or vacant)}.
local f = freshness(KEYS[2], ARGV[2])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local rank, users = -1, -1
if score then
  if ARGV[3] == '1' then
    rank = redis.call('ZREVRANK', KEYS[1], ARGV[1])
  end
  if ARGV[4] == '1' then
    users = redis.call('HLEN', KEYS[3])
  end
end
return {f, score or false, rank, users}
