-- evict.lua: hold an app's histories to its byte budget by giving up the
-- entries closest to expiring (the lowest of the app's heads), one at a
-- time, from the streams the caller declares: the channels it read as
-- the lowest heads a moment ago. A lowest head it has not declared (the
-- heads moved since) ends the call, and the caller reads them again.
-- KEYS[1] the app's sizes, KEYS[2] its heads (see lib.lua)
-- KEYS[3..] the streams of the channels ARGV[3..], in the same order
-- ARGV[1] the app's byte budget, ARGV[2] the most entries to remove
-- ARGV[3..] channels
-- Returns {entries removed, 1 if still over the budget else 0}. Its work
-- is bounded by ARGV[2] removals and one forgotten stream per KEYS entry.
-- uses: history
local h = {sizes = KEYS[1], heads = KEYS[2]}
local budget, most = tonumber(ARGV[1]), tonumber(ARGV[2])
local declared = {}
for i = 3, #ARGV do
  declared[ARGV[i]] = KEYS[i]
end
local removed = 0
while true do
  if (tonumber(redis.call('HGET', h.sizes, '')) or 0) <= budget then
    return {removed, 0}
  end
  if removed >= most then
    return {removed, 1}
  end
  local lo = redis.call('ZRANGE', h.heads, 0, 0, 'WITHSCORES')
  if #lo == 0 then
    return {removed, 0} -- nothing left to give up: the sizes settle as streams are touched
  end
  local c, expires = lo[1], tonumber(lo[2])
  local k = declared[c]
  if not k then
    return {removed, 1}
  end
  local _, _, head = hist_span(k)
  if head then
    redis.call('XDEL', k, head[1])
    removed = removed + 1
    hist_settle(h, c, k, expires - hist_ms(head[1]))
  else
    hist_settle(h, c, k, 0) -- expired whole: forget its bytes
  end
end
