-- A fixed window as FW.HIT computes it. KEYS[1]; ARGV: limit, window
-- [, cost]. The count, in a key expiring at the window's end.
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3] or '1')
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local finish = (math.floor(now / window) + 1) * window
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local limited, retry = 0, -1
if cost > limit or count + cost > limit then
  limited = 1
  if cost <= limit then retry = math.ceil((finish - now) / 1000) end
elseif cost > 0 then
  count = redis.call('INCRBY', KEYS[1], cost)
  redis.call('PEXPIREAT', KEYS[1], finish)
end
local reset = 0
if count > 0 then reset = math.ceil((finish - now) / 1000) end
return {limited, limit, math.max(0, limit - count), retry, reset}
