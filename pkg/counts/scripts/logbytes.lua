-- logbytes.lua: the bytes an app's event log holds (see eventlog.lua).
-- KEYS[1] the event log
return log_open(KEYS[1]).bytes
