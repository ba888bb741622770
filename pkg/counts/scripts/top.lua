-- top.lua: the leaderboard's first limit channels and freshness in one
-- atomic read. Read-only; O(log n + limit) while no reap is under way,
-- else O((limit + TOP_WINDOW) * (1 + reaps under way)) at most.
-- KEYS[1] global   ZSET channel -> count
-- KEYS[2] nodes    ZSET node -> last-seen (ms)
-- KEYS[3..] the reaps and their reaping hashes (exactlib.lua)
-- ARGV[1] limit, ARGV[2] stale-after ms
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else {freshness (see
-- freshlib.lua), {channel, count, ...}}: most first, equal counts in
-- reverse name order (ZREVRANGE's).
-- While a reap is under way the globals hold it, and a count only falls
-- when it leaves: it reads the globals' first channels, their counts as
-- they leave it, until the first limit of those beat every channel not
-- read (whose live count is at most the last global read), reading at most
-- TOP_WINDOW more than limit. A reap that holds more than that of the
-- first channels makes the list shorter, never wrong.
-- uses: now_ms, fresh, exact
local hs, ids = reaping(3)
if not hs then return {STATUS_REAPS, ids} end
local f = freshness(KEYS[2], ARGV[2])
local limit = tonumber(ARGV[1])
if #hs == 0 then return {f, redis.call('ZREVRANGE', KEYS[1], 0, limit - 1, 'WITHSCORES')} end
local cands, read, certain = {}, 0, 0
local budget = limit + TOP_WINDOW
while true do
  local want = limit
  if read > 0 then want = math.min(math.max(limit, 100), budget - read) end
  local kv = redis.call('ZREVRANGE', KEYS[1], read, read + want - 1, 'WITHSCORES')
  read = read + #kv / 2
  local lv = live(hs, kv, channel_field)
  for i = 1, #lv, 2 do cands[#cands + 1] = {lv[i], tonumber(lv[i + 1])} end
  table.sort(cands, function(a, b) return beats(a[2], a[1], b[2], b[1]) end)
  if #kv / 2 < want then
    certain = #cands -- every channel read
    break
  end
  -- Unread channels count at most last's global, and those at it have
  -- names below last's: a channel beating last as it stands beats them.
  local last, at = kv[#kv - 1], tonumber(kv[#kv])
  certain = 0
  while certain < #cands and beats(cands[certain + 1][2], cands[certain + 1][1], at, last) or
      (certain < #cands and cands[certain + 1][1] == last and cands[certain + 1][2] == at) do
    certain = certain + 1
  end
  if certain >= limit or read >= budget then break end
end
local out = {}
for i = 1, math.min(limit, certain) do
  out[#out + 1] = cands[i][1]
  out[#out + 1] = string.format('%d', cands[i][2])
end
return {f, out}
