-- apply.lua: publish a node's changes to its contribution and the global
-- counts in one atomic unit, and refresh the node's last-seen time.
-- KEYS[1] nodes    ZSET node -> last-seen (ms, this shard's clock)
-- KEYS[2] node     HASH channel -> this node's count
-- KEYS[3] global   ZSET channel -> sum of live nodes' counts
-- ARGV[1] node id
-- ARGV[2] mode: "delta" applies ARGV[3..] as changes and requires the node
--         to be registered; "replace" makes the contribution exactly ARGV[3..]
--         (registering the node), which is idempotent.
-- ARGV[3..] channel, count pairs
-- Returns 1 when applied, -1 when the node is not registered (it was reaped
-- or Redis lost it: the caller must replace), -2 when a delta would take a
-- count below zero (nothing written; the caller must replace).
local nodes, node, global = KEYS[1], KEYS[2], KEYS[3]
local id, mode = ARGV[1], ARGV[2]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function add_global(ch, n)
  if tonumber(redis.call('ZINCRBY', global, n, ch)) <= 0 then
    redis.call('ZREM', global, ch)
  end
end

if mode == 'delta' then
  if not redis.call('ZSCORE', nodes, id) then
    return -1
  end
  -- Check every change before writing any: a script cannot roll back.
  for i = 3, #ARGV, 2 do
    local have = tonumber(redis.call('HGET', node, ARGV[i]) or '0')
    if have + tonumber(ARGV[i + 1]) < 0 then
      return -2
    end
  end
  for i = 3, #ARGV, 2 do
    local ch, n = ARGV[i], tonumber(ARGV[i + 1])
    if tonumber(redis.call('HINCRBY', node, ch, n)) <= 0 then
      redis.call('HDEL', node, ch)
    end
    add_global(ch, n)
  end
elseif mode == 'replace' then
  local old = redis.call('HGETALL', node)
  for i = 1, #old, 2 do
    add_global(old[i], -tonumber(old[i + 1]))
  end
  redis.call('DEL', node)
  for i = 3, #ARGV, 2 do
    local ch, n = ARGV[i], tonumber(ARGV[i + 1])
    if n > 0 then
      redis.call('HSET', node, ch, n)
      add_global(ch, n)
    end
  end
else
  return redis.error_reply('unknown mode ' .. tostring(mode))
end
redis.call('ZADD', nodes, now, id)
return 1
