-- The sorted-set recipe for a concurrency limit, as peers' docs show it,
-- replying as CONC.ACQUIRE does: members are ids scored with their lease's
-- end in microseconds. KEYS[1]; ARGV: limit, lease (seconds), id. Like
-- the recipe, it removes every lapsed member on every call, refusals
-- included.
local limit, lease, id = tonumber(ARGV[1]), tonumber(ARGV[2]) * 1000000, ARGV[3]
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZSCORE', KEYS[1], id)
local live = redis.call('ZCARD', KEYS[1])
if not held and live >= limit then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  return {1, limit, 0, math.ceil((first[2] - now) / 1000000), math.ceil((last[2] - now) / 1000000)}
end
redis.call('ZADD', KEYS[1], now + lease, id)
if not held then live = live + 1 end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.ceil(last[2] / 1000))
return {0, limit, math.max(0, limit - live), -1, math.ceil((last[2] - now) / 1000000)}
