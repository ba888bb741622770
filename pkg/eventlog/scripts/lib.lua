-- lib.lua (eventlog.Lua) is prepended to this package's append.lua and
-- bytes.lua and to the count scripts that append their edges in the same
-- unit: appending to an app's event log (a stream, eventlog.Key) with byte
-- accounting. Each entry has the fields
--   t   unix ms by this shard's clock
--   ev  the event as JSON
--   o   the entry's byte offset: the sizes of every entry appended before
--       it since the log was last empty, where an entry's size is #t + #ev
-- so the log holds (o + size) of its last entry minus o of its first. A
-- trim (the deliverers' XTRIM MINID, the MAXLEN below) removes entries from
-- the head and lowers that difference by exactly what it removed: there is
-- no counter to keep in step, so none can drift from the stream.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function log_field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil -- a value, for tonumber
end

-- log_end returns the offset after an entry. An entry written before
-- offsets existed (no o) is taken to start at 0, so a log that still holds
-- such entries undercounts all but the last of them; they leave it as they
-- are delivered.
local function log_end(fields)
  local o = tonumber(log_field(fields, 'o')) or 0
  return o + #(log_field(fields, 't') or '') + #(log_field(fields, 'ev') or '')
end

-- log_open reads the state of the log at key: the bytes it holds, and the
-- offset its next entry starts at. Two O(log n) reads. max_entries (the
-- caller's ARGV: eventlog.MaxEntries) caps the log, approximately, whatever
-- it holds.
local function log_open(key, max_entries)
  local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
  if not last then
    return {key = key, max = max_entries, bytes = 0, next = 0}
  end
  local first = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)[1]
  local next = log_end(last[2])
  local bytes = next - (tonumber(log_field(first[2], 'o')) or 0)
  if bytes < 0 then bytes = 0 end -- offsets not written by this file
  return {key = key, max = max_entries, bytes = bytes, next = next}
end

-- log_add appends one event (JSON) stamped t (a string) to an opened log.
local function log_add(h, t, ev)
  redis.call('XADD', h.key, 'MAXLEN', '~', h.max, '*', 't', t, 'ev', ev,
    'o', string.format('%d', h.next))
  local size = #t + #ev
  h.next = h.next + size
  h.bytes = h.bytes + size
end
