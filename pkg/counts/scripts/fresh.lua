-- fresh.lua: freshness of an app's counts (see freshlib.lua), queued in the
-- MULTI of a read so it describes exactly that read. Read-only.
-- KEYS[1] nodes    ZSET node -> last-seen (ms)
-- ARGV[1] stale-after in ms
-- uses: now_ms, fresh
return freshness(KEYS[1], ARGV[1])
