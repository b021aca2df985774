-- A token bucket as TB.TAKE computes it, in microseconds. KEYS[1]; ARGV:
-- capacity, refill_tokens, refill_period [, tokens]. The state is the
-- instant the bucket is full again.
local capacity, refill, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = tonumber(ARGV[4] or '1')
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local interval = math.ceil(period * 1000000 / refill)
local fill = interval * capacity
local full = tonumber(redis.call('GET', KEYS[1]) or now)
local ahead = math.max(full, now) - now
local nxt = math.max(ahead + interval * n, 0)
local limited, retry = 0, -1
if nxt > fill then
  limited = 1
  if interval * n <= fill then retry = nxt - fill end
  nxt = ahead
elseif n > 0 then
  redis.call('SET', KEYS[1], string.format('%d', now + nxt), 'PX', math.ceil(nxt / 1000))
end
local remaining = math.min(capacity, math.max(0, math.floor((fill - nxt) / interval)))
local function secs(us) if us < 0 then return -1 end return math.ceil(us / 1000000) end
return {limited, capacity, remaining, secs(retry), secs(nxt)}
