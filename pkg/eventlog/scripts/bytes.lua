-- bytes.lua: the bytes an app's event log holds (see lib.lua), and the
-- events its budget refused: ever, and since the last events_dropped
-- notice, with the time of the first of those.
-- KEYS[1] the event log, KEYS[2] its index; ARGV none
-- Returns {bytes, dropped, dropped not told yet, unix ms of the first of
-- those or 0}.
-- uses: eventlog
local h = log_open(KEYS[1], 0, 0)
return {h.bytes, h.dropped, h.dropped - h.noticed, tonumber(h.dropped_at) or 0}
