-- publish.lua: record one event in its channel's history and publish it,
-- in one atomic unit, so the stream id is the event's serial and every
-- subscriber receives events in the history's order. Then hold the
-- channel to its events and seconds, and the app to its byte budget.
-- KEYS[1] the channel's stream (history.Key)
-- KEYS[2] the channel's fanout topic (package fanout names it)
-- KEYS[3] the app's sizes, KEYS[4] its heads (see lib.lua)
-- ARGV[1] the channel, ARGV[2] its events, ARGV[3] its seconds in ms
-- ARGV[4] the app's byte budget
-- ARGV[5] event, ARGV[6] data, ARGV[7] user id ('' for none)
-- ARGV[8] the fanout payload, to which the serial is appended
-- ARGV[9] 'publish', or 'spublish' on Redis Cluster
-- Returns {serial, 1 if the app's histories are over the budget else 0}:
-- over it, the caller runs evict.lua, which declares the streams it
-- trims (this script may touch only the keys it declares, and which
-- stream the budget trims is known only once the heads are read). Its
-- work is bounded: one XADD and trims of at most events + 1 entries.
-- uses: now_ms, history
local key, ch = KEYS[1], ARGV[1]
local h = {sizes = KEYS[3], heads = KEYS[4]}
local events, ttl, budget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
-- The new entry's offset follows the last entry's (lib.lua).
local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
local nxt = last and (tonumber(hist_field(last[2], 'o')) or 0) + hist_size(last[2]) or 0
local fields = {'e', ARGV[5], 'd', ARGV[6]}
if ARGV[7] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'u', ARGV[7]
end
fields[#fields + 1], fields[#fields + 2] = 'o', string.format('%d', nxt)
local fresh = not last and redis.call('EXISTS', key) == 0
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
-- Trimmed by age only when the first entry is older than the channel's
-- seconds: one read in the common case.
local oldest = now_ms() - ttl
local first = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)[1]
if hist_ms(first[1]) < oldest then
  local minid = string.format('%d-0', oldest)
  gone = redis.call('XREVRANGE', key, '(' .. minid, '-', 'COUNT', 1)[1][1]
  redis.call('XTRIM', key, 'MINID', minid)
  first = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)[1] -- the new entry at least
end
if gone then
  redis.call('XSETID', key, id, 'MAXDELETEDID', gone)
end
redis.call('PEXPIRE', key, ttl)
-- What hist_settle does, from what is known here: the stream's last entry
-- is the new one.
local bytes = nxt + hist_size(fields) - (tonumber(hist_field(first[2], 'o')) or 0)
local total = redis.call('HINCRBY', h.sizes, '', bytes - (tonumber(redis.call('HGET', h.sizes, ch)) or 0))
redis.call('HSET', h.sizes, ch, bytes)
redis.call('ZADD', h.heads, hist_ms(first[1]) + ttl, ch)
-- The serial as uvarint(length) .. id: one byte, since ids are short.
assert(#id < 128, 'stream id too long')
redis.call(ARGV[9], KEYS[2], ARGV[8] .. string.char(#id) .. id)
return {id, total > budget and 1 or 0}
