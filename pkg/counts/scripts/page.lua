-- page.lua: one page of a paging walk: up to limit names of the snapshot
-- after the cursor, with their current counts (names vacated since the
-- snapshot, or held only by reaps under way, are skipped). O(log n +
-- limit * (1 + reaps under way)).
-- KEYS[1] snapshot (scores all 0), KEYS[2] global, KEYS[3..] the reaps and
-- their reaping hashes (exactlib.lua)
-- ARGV[1] min, ARGV[2] max (ZRANGE BYLEX bounds), ARGV[3] limit,
-- ARGV[4] idle ttl ms
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), {STATUS_EXPIRED} when the
-- snapshot expired (statuses: keys.go), else {more (1|0), last name
-- scanned, {name, count, ...}}.
-- uses: status, exact
local hs, ids = reaping(3)
if not hs then return {STATUS_REAPS, ids} end
if redis.call('PEXPIRE', KEYS[1], ARGV[4]) == 0 then
  return {STATUS_EXPIRED}
end
local limit = tonumber(ARGV[3])
local names = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'BYLEX', 'LIMIT', 0, limit + 1)
local more = 0
if #names > limit then
  more = 1
  names[#names] = nil
end
local out = {}
if #names > 0 then
  local scores = redis.call('ZMSCORE', KEYS[2], unpack(names))
  for i, name in ipairs(names) do
    if scores[i] then
      table.insert(out, name)
      table.insert(out, scores[i])
    end
  end
end
return {more, names[#names] or '', live(hs, out, channel_field)}
