-- A sliding log as SL.HIT keeps it: a sorted set scored in microseconds,
-- one member per admitted unit. KEYS[1]; ARGV: limit, window [, cost].
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2]) * 1000000
local cost = tonumber(ARGV[3] or '1')
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local live = redis.call('ZCOUNT', KEYS[1], '(' .. (now - window), '+inf')
local limited, retry = 0, -1
if cost > limit or live + cost > limit then
  limited = 1
  if cost <= limit then
    local nth = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. (now - window), '+inf', 'WITHSCORES', 'LIMIT', live + cost - limit - 1, 1)
    retry = math.ceil((tonumber(nth[2]) + window - now) / 1000000)
  end
else
  if cost > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
    local n = redis.call('ZCARD', KEYS[1])
    for i = 1, cost do
      redis.call('ZADD', KEYS[1], now, now .. '-' .. (n + i))
    end
    redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
  end
  live = live + cost
end
local reset = 0
if live > 0 then reset = math.ceil(window / 1000000) end
return {limited, limit, math.max(0, limit - live), retry, reset}
