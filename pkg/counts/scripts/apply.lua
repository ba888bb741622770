-- apply.lua: publish a node's changes to its contribution and the global
-- counts in one atomic unit, and refresh the node's last-seen time.
-- KEYS[1] nodes    ZSET node -> last-seen (ms, this shard's clock)
-- KEYS[2] node     HASH field -> this node's count (fields: see lib.lua)
-- KEYS[3..] as lib.lua says: the global counts, the event log and its
--         index if the unit logs, conns, seq, the members and info hash of
--         each presence channel in the pairs, and last
-- KEYS[#KEYS] epochs HASH node -> token of its current contribution
-- ARGV[1..4] as lib.lua says: the app's key prefix and what to log
-- ARGV[5] node id
-- ARGV[6] the node's epoch: the token its last republish set (reap.lua,
--         retiring). The pairs are changes to the contribution that
--         republish started, applied only if the node is registered and its
--         token is still this one: a unit the node sent before a later
--         republish (it timed out in the client, but Redis still ran it,
--         after the retire) would otherwise land on the republished truth.
-- ARGV[7] number of field, count pairs that follow
-- then the pairs, then field, user_info pairs for presence members.
-- Returns {STATUS_APPLIED, changed channels, member edges} (see
-- changes()), or, with nothing written (keys.go says what each means):
-- {STATUS_UNREGISTERED} when the node is not registered or its epoch is
-- another, {STATUS_NEGATIVE} when a delta would take a count below zero,
-- {STATUS_UNDECLARED, fields} when fields touch keys not declared.
-- uses: status, now_ms, eventlog, lib
local nodes, node, epochs = KEYS[1], KEYS[2], KEYS[#KEYS]
local id, epoch = ARGV[5], ARGV[6]
local npairs = tonumber(ARGV[7])
local first, last = 8, 7 + 2 * npairs

local infos = {}
for i = last + 1, #ARGV, 2 do
  infos[ARGV[i]] = ARGV[i + 1]
end
local pairs_list = {}
for i = first, last do
  table.insert(pairs_list, ARGV[i])
end
local missing = missing_keys(pairs_list)
if #missing > 0 then
  return {STATUS_UNDECLARED, missing}
end

if not redis.call('ZSCORE', nodes, id) or redis.call('HGET', epochs, id) ~= epoch then
  return {STATUS_UNREGISTERED}
end
-- Check every decrement before writing any: a script cannot roll back.
-- (An increment cannot take a count below zero: storms of subscribes
-- skip the read.)
for i = first, last, 2 do
  local n = tonumber(ARGV[i + 1])
  if n < 0 and tonumber(redis.call('HGET', node, ARGV[i]) or '0') + n < 0 then
    return {STATUS_NEGATIVE}
  end
end
for i = first, last, 2 do
  local f, n = ARGV[i], tonumber(ARGV[i + 1])
  if tonumber(redis.call('HINCRBY', node, f, n)) <= 0 then
    redis.call('HDEL', node, f)
  end
  apply_field(f, n, infos[f])
end
redis.call('ZADD', nodes, now_ms(), id)
local chans, edges = changes()
log_events(edges)
return {STATUS_APPLIED, chans, edges}
