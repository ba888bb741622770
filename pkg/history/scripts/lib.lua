-- lib.lua (prelude history) is prepended to this package's scripts: the
-- byte accounting of an app's histories. Each entry of a channel's stream
-- (history.Key) has the fields
--   e  the event's name
--   d  its data
--   u  its user id, only when there is one
--   o  the entry's byte offset: the sizes of every entry appended to the
--      stream before it since it was last empty, where an entry's size is
--      #e + #d + #u
-- so a stream holds (o + size) of its last entry minus o of its first, as
-- the webhook event log counts itself: a trim from the head lowers that
-- difference by exactly what it removed.
--
-- Beside the streams, two keys per app hold what the budget needs:
--   sizes (a hash)  channel -> the bytes its stream held when a script last
--                   touched it; field '' -> the sum of those (the app's)
--   heads (a zset)  channel -> when its stream's first entry expires (unix
--                   ms: the entry's time plus the channel's seconds), so
--                   the lowest is the entry the budget gives up first, and
--                   a stream that expired whole (its key's TTL) comes
--                   before every live one.
-- KEYS, ARGV: none of its own; callers pass hist_open the keys.
-- uses: none

local function hist_field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return ''
end

local function hist_size(fields)
  return #hist_field(fields, 'e') + #hist_field(fields, 'd') + #hist_field(fields, 'u')
end

-- hist_span returns the bytes the stream at key holds, the offset of its
-- next entry, and its first entry (nil when it is empty or missing). Two
-- O(log n) reads.
local function hist_span(key)
  local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
  if not last then return 0, 0, nil end
  local first = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)[1]
  local nxt = (tonumber(hist_field(last[2], 'o')) or 0) + hist_size(last[2])
  return nxt - (tonumber(hist_field(first[2], 'o')) or 0), nxt, first
end

-- hist_ms is the unix ms of a stream id.
local function hist_ms(id)
  return tonumber(string.match(id, '^(%d+)'))
end

-- hist_settle records what the stream of channel ch (at key) holds now in
-- the app's sizes and heads (h = {sizes = key, heads = key}), ttl being
-- the channel's seconds in ms. It returns the bytes it holds.
local function hist_settle(h, ch, key, ttl)
  local bytes, _, first = hist_span(key)
  local was = tonumber(redis.call('HGET', h.sizes, ch)) or 0
  if bytes ~= was then
    redis.call('HINCRBY', h.sizes, '', bytes - was)
  end
  if first then
    redis.call('HSET', h.sizes, ch, bytes)
    redis.call('ZADD', h.heads, hist_ms(first[1]) + ttl, ch)
  else
    redis.call('HDEL', h.sizes, ch)
    redis.call('ZREM', h.heads, ch)
  end
  return bytes
end
