-- tell.lua: log the events_dropped notice of the refusals not told yet, if
-- there are any and it fits (see log_tell in lib.lua).
-- KEYS[1] the event log, KEYS[2] its index
-- ARGV[1] the log's entry cap (eventlog.MaxEntries), ARGV[2] its byte budget
-- Returns TELL_LOGGED if it logged the notice, else TELL_NOTHING.
-- uses: status, now_ms, eventlog
local h = log_open(KEYS[1], ARGV[1], ARGV[2])
if log_tell(h, string.format('%d', now_ms())) then
  return TELL_LOGGED
end
return TELL_NOTHING
