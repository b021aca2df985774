-- The sliding window counter and the fixed window: a string state each
-- (see the window package, which this follows step for step).

-- muldiv is floor(a x b / c) and whether the ceiling fits 64 bits, for
-- a, b >= 0 and c > 0: the exact product, as the module's 128-bit one.
local function muldiv_ceil(a, b, c)
  local q, r = quorem(mul(a, b), c)
  if lt(0, r) then q = add(q, 1) end
  return q, fits(q)
end
-- The window holding now: its start (whole seconds, since the window is)
-- and its end, or nil past the 64-bit range.
local function window_at(now, window)
  local start = now[1] - math.fmod(now[1], window)
  return start, start + window
end

local function in_range(s) -- an instant of whole second s fits 64-bit ns
  return s <= MAX_SECONDS
end
-- fixed_hit is the fixed window's decision on count (stored, expiring at
-- expire ms) at now: decision, the count to store, the window's end (an
-- instant); with debt, a charge (FixedWindow.Charge) is counted past the
-- limit. span, when set, is the window's {start, end} in Unix ms (SPAN).
local function fixed_hit(cost, debt, L, window, count, expire, now, span)
  local d = {limited = false, retry = -1, write = false, reset = 0}
  local start, stop
  if span then
    start, stop = span[1], span[2]
  else
    start, stop = window_at(now, window)
    if not in_range(stop) then return nil, nil, nil, fail(WINDOW_OVERFLOW) end
    start, stop = start * 1000, stop * 1000
  end
  local r = math.fmod(stop, 1000)
  local stop_at = {(stop - r) / 1000, r * 1000000}
  if lt(0, count) and expire <= start then count = 0 end
  d.write = lt(0, count) and expire > stop
  local left = since(stop_at, now)
  local n = add(count, cost)
  if lt(cost, 0) then -- a return: never below zero
    n = imax(n, 0)
    d.write = d.write or cmp(n, count) ~= 0
  elseif lt(L, cost) or not fits(n) or lt(L, n) then
    d.limited = true
    if debt and lt(0, cost) then
      if not fits(n) then n = MAXI end -- a count past 2^63 - 1 stops there
      d.write, d.retry = true, left
    else
      if le(cost, L) then d.retry = left end
      n = count
    end
  else
    d.write = d.write or lt(0, cost)
  end
  d.remaining = imax(sub(L, n), 0)
  if lt(0, n) then d.reset = left end
  return d, n, stop_at
end
-- sliding_hit is the sliding window counter's decision on counts c at now:
-- decision, the counts to store, when the key's work ends; with debt, a
-- charge (SlidingWindow.Charge) past the limit, retry one unit's after it.
local function sliding_hit(cost, debt, L, window, c, now)
  local W = mul(window, SECOND)
  local d = {limited = false, retry = -1, write = false}
  local start, stop = window_at(now, window)
  local idx = start / window -- exact: start is a multiple of window
  if cmp(c.index, idx) == 0 then
  elseif cmp(c.index, idx - 1) == 0 then
    c = {index = idx, current = 0, previous = c.current}
  elseif lt(c.index, idx) then
    c = {index = idx, current = 0, previous = 0}
  else -- a future window: the clock stepped back
    d.write = lt(0, c.current) or lt(0, c.previous)
    c = {index = idx, current = c.current, previous = c.previous}
  end
  if not in_range(stop) or not in_range(stop + window) then return nil, nil, nil, fail(WINDOW_OVERFLOW) end
  local e = since(now, {start, 0}) -- elapsed in the current window
  local weight = quo(mul(c.previous, sub(W, e)), W)
  local nxt = {index = c.index, current = c.current, previous = c.previous}
  local est = add(c.current, weight)
  local total = add(est, cost)
  if lt(cost, 0) then -- a return: off the current count only, never below zero
    nxt.current = imax(add(c.current, cost), 0)
    d.write = d.write or cmp(nxt.current, c.current) ~= 0
  elseif lt(L, cost) or not fits(est) or not fits(total) or lt(L, total) then
    d.limited = true
    if debt and lt(0, cost) then
      nxt.current = add(nxt.current, cost)
      if not fits(nxt.current) then nxt.current = MAXI end -- a count past 2^63 - 1 stops there
      c, cost, d.write = nxt, 1, true
    end
    if le(cost, L) then
      -- retry: when the estimate first admits cost
      local r = sub(W, e)
      local room = sub(sub(L, cost), c.current)
      local done = false
      if le(0, room) and lt(0, c.previous) then
        local q, ok = muldiv_ceil(add(room, 1), W, c.previous)
        if ok and lt(sub(q, 1), r) then d.retry, done = sub(r, sub(q, 1)), true end
      end
      if not done then
        if cmp(c.current, 0) == 0 then
          d.retry = r
        else
          local m, ok = muldiv_ceil(add(sub(L, cost), 1), W, c.current)
          if not ok or lt(W, m) then d.retry = r else d.retry = sub(add(add(r, W), 1), m) end
        end
      end
    end
  elseif lt(0, cost) then
    nxt.current = add(nxt.current, cost)
    d.write = true
  end
  local used = add(nxt.current, weight)
  d.remaining = imin(imax(sub(L, used), 0), L)
  local expire
  if lt(0, nxt.current) then
    expire = {stop + window, 0}
  elseif lt(0, nxt.previous) then
    expire = {stop, 0}
  else
    expire = now
  end
  d.reset = since(expire, now)
  return d, nxt, expire
end
-- shifted is instant a moved by d ms (d an integer, |d| < 2^53).
local function shifted(a, d)
  local r = math.fmod(d, 1000) -- of d's sign
  local s, ns = a[1] + (d - r) / 1000, a[2] + r * 1000000
  if ns < 0 then s, ns = s - 1, ns + SECOND elseif ns >= SECOND then s, ns = s + 1, ns - SECOND end
  return {s, ns}
end
-- window_limit runs one limit of a window family on its key: the five
-- integers and the write to make ({key, set = value, at = instant} or
-- {key, del = true}), or an error. bounds is bounds_of's: with an offset
-- (SPREAD), the key's windows start offset ms after the epoch's alignment:
-- the limit runs on a clock shifted back by it, and the instants it stores
-- are shifted forward; with a span (SPAN), the fixed window is the one of
-- start-end and end-next holding now.
local function window_limit(kind, key, v, reserve, now, ms, bounds)
  local L, window, cost = v[1], v[2], v[3]
  local kindof, expire, raw = read_string(key)
  local state = kind == 'sw' and COUNTER_STATE or FIXED_STATE
  local err = check_key(kindof, expire, 'string', state)
  if err then return nil, nil, err end
  local offset, span = bounds and bounds.offset or 0, bounds and bounds.span
  if offset ~= 0 then now, expire = shifted(now, -offset), expire - offset end
  local d, n, at
  if kind == 'fw' then
    local count = 0
    if raw then
      count = parse_count(raw)
      if count == nil then return nil, nil, other_data(state, 'not a decimal integer') end
    end
    if span then -- the window of start-end and end-next holding now
      local at_ms = now[1] * 1000 + math.floor(now[2] / 1000000)
      local from, to = span[1], span[2]
      if at_ms >= to then from, to = to, span[3] end
      if at_ms >= to then return nil, nil, fail(text(T_SPAN_PAST, fmt(to), fmt(at_ms))) end
      span = {from, to}
    end
    d, n, at, err = reserved(fixed_hit, cost, reserve, L, window, count, expire, now, span)
    if err then return nil, nil, err end
    local reply = five(d.limited, L, d.remaining, d.retry, d.reset, ms)
    if d.write and cmp(n, 0) == 0 then return reply, {key = key, del = raw ~= nil} end -- a return of the whole count
    if d.write then return reply, {key = key, set = fmt(n), at = shifted(at, offset)} end
    return reply, {key = key}
  end
  local c = {index = 0, current = 0, previous = 0}
  if raw then
    local a, b, r = string.match(raw, '^([^:]*):([^:]*):(.*)$')
    if a then c = {index = parse_count(a), current = parse_count(b), previous = parse_count(r)} end
    if not a or not c.index or not c.current or not c.previous then
      return nil, nil, other_data(state, 'not three decimal integers')
    end
  end
  d, n, at, err = reserved(sliding_hit, cost, reserve, L, window, c, now)
  if err then return nil, nil, err end
  local reply = five(d.limited, L, d.remaining, d.retry, d.reset, ms)
  if not d.write then return reply, {key = key} end
  if not after(at, now) then return reply, {key = key, del = raw ~= nil} end
  return reply, {key = key, set = fmt(n.index) .. ':' .. fmt(n.current) .. ':' .. fmt(n.previous), at = shifted(at, offset)}
end
-- window_store applies a window limit's write.
local function window_store(w)
  if w.set then
    redis.call('SET', w.key, w.set, 'PXAT', string.format('%d', ceil_ms(w.at)))
  elseif w.del then
    redis.call('DEL', w.key)
  end
end
-- The fast paths: fixed_hit and sliding_hit on plain numbers, for the common
-- call (fast_args: a cost of 0 or more, no RESERVE) on the common key (empty,
-- or plain counts of at most 15 digits that expire), windows below 9000000 s
-- and products under 2^53: exact in a double, so equal to the exact path.
-- Each gives the reply (or WRONGTYPE), or nil for the exact path to decide;
-- it writes only when it decides.

-- fast_read reads a window state's raw value and expiry: nil for an empty
-- key, false for one the fast path leaves to the exact path, or WRONGTYPE.
local function fast_read(key, pattern)
  local raw = redis.pcall('GET', key)
  if not raw then return nil end
  if type(raw) == 'table' then return nil, nil, fail(WRONGTYPE) end
  if not string.find(raw, pattern) then return false end
  local expire = redis.call('PEXPIRETIME', key)
  if expire < 0 then return false end
  return raw, expire
end

local function fast_fixed(_, key, v, now, ms, peek)
  local L, window, cost = v[1], v[2], v[3]
  if window >= 9000000 or now[1] >= MAX_SECONDS - 2 * 9000000 then return nil end
  local start = now[1] - math.fmod(now[1], window)
  local stop = start + window
  local raw, expire, err = fast_read(key, '^%d%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?$')
  if err then return err end
  if raw == false then return nil end
  local count, write = 0, false
  if raw then
    count = tonumber(raw)
    if count > 0 and expire <= start * 1000 then count = 0 end
    write = count > 0 and expire > stop * 1000
  end
  local left = (stop - now[1]) * SECOND - now[2]
  local limited, retry, n = false, -1, count + cost
  if cost > L or n > L then
    limited, n = true, count
    if cost <= L then retry = left end
  else
    write = write or cost > 0
  end
  local remaining, reset = L - n, 0
  if remaining < 0 then remaining = 0 end
  if n > 0 then reset = left end
  if write and not peek then
    redis.call('SET', key, string.format('%d', n), 'PXAT', string.format('%d', stop * 1000))
  end
  return {limited and 1 or 0, L, remaining, fast_time(retry, ms), fast_time(reset, ms)}
end
-- ceil_div is the ceiling of a / b for 0 <= a < 2^53 and b > 0.
local function ceil_div(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

local function fast_sliding(_, key, v, now, ms, peek)
  local L, window, cost = v[1], v[2], v[3]
  if window >= 9000000 or now[1] >= MAX_SECONDS - 2 * 9000000 then return nil end
  local W = window * SECOND
  if (L + 1) * W >= TWO53 then return nil end
  local start = now[1] - math.fmod(now[1], window)
  local stop = start + window
  local idx = start / window
  local raw, _, err = fast_read(key, '^%d+:%d+:%d+$')
  if err then return err end
  if raw == false then return nil end
  local cur, prev, write = 0, 0, false
  if raw then
    local a, b, c = string.match(raw, '^(%d+):(%d+):(%d+)$')
    if #a > 15 or #b > 15 or #c > 15 then return nil end
    local index = tonumber(a)
    cur, prev = tonumber(b), tonumber(c)
    if index == idx - 1 then
      cur, prev = 0, cur
    elseif index < idx then
      cur, prev = 0, 0
    elseif index > idx then -- a future window: the clock stepped back
      write = cur > 0 or prev > 0
    end
  end
  if prev * W >= TWO53 then return nil end
  local e = (now[1] - start) * SECOND + now[2] -- elapsed in the current window
  local p = prev * (W - e)
  local weight = (p - math.fmod(p, W)) / W
  local est = cur + weight
  local limited, retry = false, -1
  if cost > L or est + cost > L then
    limited = true
    if cost <= L then
      local r = W - e
      local room = (L - cost) - cur
      local done = false
      if room >= 0 and prev > 0 then
        local q = ceil_div((room + 1) * W, prev)
        if q - 1 < r then retry, done = r - (q - 1), true end
      end
      if not done then
        if cur == 0 then
          retry = r
        else
          local m = ceil_div((L - cost + 1) * W, cur)
          if W < m then retry = r else retry = r + W + 1 - m end
        end
      end
    end
  elseif cost > 0 then
    cur, write = cur + cost, true
  end
  local remaining = L - (cur + weight)
  if remaining < 0 then remaining = 0 elseif remaining > L then remaining = L end
  local expire_s, reset = nil, 0 -- the key's work ends at expire_s (now when nil)
  if cur > 0 then
    expire_s = stop + window
  elseif prev > 0 then
    expire_s = stop
  end
  if expire_s then reset = (expire_s - now[1]) * SECOND - now[2] end
  if write and not peek then
    if expire_s then
      redis.call('SET', key, string.format('%d:%d:%d', idx, cur, prev), 'PXAT', string.format('%d', expire_s * 1000))
    elseif raw then
      redis.call('DEL', key)
    end
  end
  return {limited and 1 or 0, L, remaining, fast_time(retry, ms), fast_time(reset, ms)}
end
