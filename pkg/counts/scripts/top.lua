-- top.lua: the leaderboard's first limit channels and freshness in one
-- atomic read. Read-only; O(log n + limit * (1 + reaps under way)).
-- KEYS[1] global   ZSET channel -> count
-- KEYS[2] nodes    ZSET node -> last-seen (ms)
-- KEYS[3..] the reaps and their reaping hashes (exactlib.lua)
-- ARGV[1] limit, ARGV[2] stale-after ms
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else {freshness (see
-- freshlib.lua), {channel, count, ...}}: most first, equal counts in
-- reverse name order (ZREVRANGE's). While a reap is under way the limit
-- channels are those first by the global counts, which hold it: their
-- counts leave it out, and they are ordered again by those counts.
local hs, ids = reaping(3)
if not hs then return {STATUS_REAPS, ids} end
local f = freshness(KEYS[2], ARGV[2])
local kv = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
if #hs == 0 then return {f, kv} end
kv = live(hs, kv, channel_field)
local top = {}
for i = 1, #kv, 2 do top[#top + 1] = {kv[i], tonumber(kv[i + 1])} end
table.sort(top, function(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  return a[1] > b[1]
end)
local out = {}
for _, c in ipairs(top) do
  out[#out + 1] = c[1]
  out[#out + 1] = string.format('%d', c[2])
end
return {f, out}
