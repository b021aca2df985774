-- A leaky-bucket shaper as LB.ENQUEUE computes it, in microseconds.
-- KEYS[1]; ARGV: capacity, leak_count, leak_period [, quantity]. The state is
-- the instant the queue is empty again; field 5 is the delay.
local capacity, leak, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local q = tonumber(ARGV[4] or '1')
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local interval = math.ceil(period * 1000000 / leak)
local window = interval * (capacity + 1)
local empty = tonumber(redis.call('GET', KEYS[1]) or now)
local ahead = math.max(empty, now) - now
local nxt = ahead + interval * q
local limited, retry, delay = 0, -1, 0
if nxt > window then
  limited = 1
  if interval * q <= window then retry = nxt - window end
  nxt = ahead
else
  delay = ahead
  if q > 0 then
    redis.call('SET', KEYS[1], string.format('%d', now + nxt), 'PX', math.ceil(nxt / 1000))
  end
end
local free = math.min(capacity, math.max(0, math.floor((window - nxt) / interval)))
local function secs(us) if us < 0 then return -1 end return math.ceil(us / 1000000) end
return {limited, capacity, free, secs(retry), secs(delay)}
