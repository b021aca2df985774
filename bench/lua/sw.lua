-- A sliding window counter as SW.HIT computes it, in microseconds.
-- KEYS[1]; ARGV: limit, window [, cost]. State "index:current:previous".
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2]) * 1000000
local cost = tonumber(ARGV[3] or '1')
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local idx = math.floor(now / window)
local cur, prev = 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local i, c, p = string.match(v, '^(%d+):(%d+):(%d+)$')
  i, c, p = tonumber(i), tonumber(c), tonumber(p)
  if i == idx then cur, prev = c, p elseif i == idx - 1 then prev = c end
end
local e = now - idx * window
local weight = math.floor(prev * (window - e) / window)
local limited = 0
if cost > limit or cur + weight + cost > limit then
  limited = 1
elseif cost > 0 then
  cur = cur + cost
  redis.call('SET', KEYS[1], idx .. ':' .. cur .. ':' .. prev, 'PXAT', math.ceil((idx + 2) * window / 1000))
end
local reset = 0
if cur > 0 then reset = 2 * window - e elseif prev > 0 then reset = window - e end
return {limited, limit, math.max(0, limit - cur - weight), -1, math.ceil(reset / 1000000)}
