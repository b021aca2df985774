-- GCRA as GCRA.THROTTLE computes it, in microseconds: what a user without
-- the module runs. KEYS[1]; ARGV: max_burst, count, period [, quantity].
local burst, count, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local qty = tonumber(ARGV[4] or '1')
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local interval = math.floor(period * 1000000 / count) -- whole microseconds: exact in a double
local tolerance = interval * (burst + 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + interval * qty
local limited, retry, ttl = 0, -1, 0
if new - now > tolerance then
  limited = 1
  if interval * qty <= tolerance then retry = new - now - tolerance end
  ttl = tat - now
else
  ttl = new - now
  if qty > 0 then
    redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil(ttl / 1000))
  end
end
local remaining = math.max(0, math.floor((tolerance - ttl) / interval))
local function secs(us) if us < 0 then return -1 end return math.ceil(us / 1000000) end
return {limited, burst + 1, remaining, secs(retry), secs(ttl)}
