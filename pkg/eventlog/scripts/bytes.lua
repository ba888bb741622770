-- bytes.lua: the bytes an app's event log holds (see lib.lua).
-- KEYS[1] the event log
return log_open(KEYS[1], 0).bytes
