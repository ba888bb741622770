-- load.lua: what a wsnode reads to cap an app's occupied channels, as
-- exactlib.lua reads them. Read-only; O(1) while no reap is under way,
-- else O(REAP_WINDOW * reaps^2) (vacant_live).
-- KEYS[1] global ZSET channel -> count, KEYS[2] nodes ZSET node ->
-- last-seen, KEYS[3..] the reaps and their reaping hashes (exactlib.lua)
-- ARGV[1] the reading node, ARGV[2] the channel asked about
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else {occupied channels,
-- nodes, 1 if the reading node is one of them, 1 if the channel is
-- occupied}.
-- uses: exact
local hs, ids = reaping(3)
if not hs then return {STATUS_REAPS, ids} end
local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
local occupied = 0
if score and #live(hs, {ARGV[2], score}, channel_field) > 0 then occupied = 1 end
return {redis.call('ZCARD', KEYS[1]) - vacant_live(hs, KEYS[1]), redis.call('ZCARD', KEYS[2]),
  redis.call('ZSCORE', KEYS[2], ARGV[1]) and 1 or 0, occupied}
