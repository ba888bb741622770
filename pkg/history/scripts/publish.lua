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
local _, nxt, first = hist_span(key)
local fields = {'e', ARGV[5], 'd', ARGV[6]}
if ARGV[7] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'u', ARGV[7]
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
redis.call(ARGV[9], KEYS[2], ARGV[8] .. string.char(#id) .. id)

local full = (tonumber(redis.call('HGET', h.sizes, '')) or 0) > budget
return {id, full and 1 or 0}
