-- page.lua: one page of a paging walk: up to limit names of the snapshot
-- after the cursor, with their current counts (names vacated since the
-- snapshot are skipped). O(log n + limit).
-- KEYS[1] snapshot (scores all 0), KEYS[2] global
-- ARGV[1] min, ARGV[2] max (ZRANGE BYLEX bounds), ARGV[3] limit,
-- ARGV[4] idle ttl ms
-- Returns {STATUS_EXPIRED} when the snapshot expired (statuses: keys.go), else {more (1|0), last name
-- scanned, {name, count, ...}}.
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
return {more, names[#names] or '', out}
