-- publish.lua: record one event in its channel's history and publish it,
-- in one atomic unit, so the stream id is the event's serial and every
-- subscriber receives events in the history's order. Then hold the
-- channel to its events and seconds, and the app to its byte budget.
-- KEYS[1] the channel's stream (history.Key)
-- KEYS[2] the channel's fanout topic (package fanout names it)
-- KEYS[3] the app's sizes, KEYS[4] its heads (see lib.lua)
-- ARGV[1] the channel, ARGV[2] its events, ARGV[3] its seconds in ms
-- ARGV[4] the app's byte budget, ARGV[5] entries the budget may remove
--         in this call at most
-- ARGV[6] event, ARGV[7] data, ARGV[8] user id ('' for none)
-- ARGV[9] the fanout payload, to which the serial is appended
-- ARGV[10] 'publish', or 'spublish' on Redis Cluster
-- Returns {serial, entries the budget removed}. Its work is bounded: one
-- XADD, trims of at most events + 1 entries, and ARGV[5] removals.
-- uses: now_ms, history
local key, ch = KEYS[1], ARGV[1]
local h = {sizes = KEYS[3], heads = KEYS[4]}
local events, ttl, budget, evict = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local _, nxt, first = hist_span(key)
local fields = {'e', ARGV[6], 'd', ARGV[7]}
if ARGV[8] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'u', ARGV[8]
end
fields[#fields + 1], fields[#fields + 2] = 'o', string.format('%d', nxt)
local fresh = redis.call('EXISTS', key) == 0
local id = redis.call('XADD', key, '*', unpack(fields))
-- The stream's max-deleted-entry-id says what since.lua needs: the last
-- entry removed. XDEL keeps it, trims do not, so the trims below record
-- it themselves. Entries only ever go from the head, so it only grows.
-- What came before a stream started anew (an expired one, data Redis
-- lost) is unknown: its first entry stands for it.
local gone = fresh and id or nil
local over = redis.call('XLEN', key) - events
if over > 0 then
  local cut = redis.call('XRANGE', key, '-', '+', 'COUNT', over)
  gone = cut[#cut][1]
  redis.call('XTRIM', key, 'MAXLEN', events)
end
local minid = string.format('%d-0', now_ms() - ttl)
local aged = redis.call('XREVRANGE', key, '(' .. minid, '-', 'COUNT', 1)[1]
if aged then
  gone = aged[1]
  redis.call('XTRIM', key, 'MINID', minid)
end
if gone then
  redis.call('XSETID', key, id, 'MAXDELETEDID', gone)
end
redis.call('PEXPIRE', key, ttl)
hist_settle(h, ch, key, ttl)
-- The serial as uvarint(length) .. id: one byte, since ids are short.
assert(#id < 128, 'stream id too long')
redis.call(ARGV[10], KEYS[2], ARGV[9] .. string.char(#id) .. id)

-- The budget gives up the entries closest to expiring, a bounded number.
local base = string.sub(key, 1, #key - #ch)
local removed = 0
for _ = 1, evict do
  if (tonumber(redis.call('HGET', h.sizes, '')) or 0) <= budget then break end
  local lo = redis.call('ZRANGE', h.heads, 0, 0, 'WITHSCORES')
  if #lo == 0 then break end
  local c, expires = lo[1], tonumber(lo[2])
  local k = base .. c
  local _, _, head = hist_span(k)
  if head then
    redis.call('XDEL', k, head[1])
    removed = removed + 1
    hist_settle(h, c, k, expires - hist_ms(head[1]))
  else
    hist_settle(h, c, k, 0) -- expired whole: forget its bytes
  end
end
return {id, removed}
