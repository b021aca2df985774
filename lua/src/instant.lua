-- GCRA, the token bucket and the shaper: one instant of state each (see
-- the gcra and bucket packages, which this follows step for step).

-- A schedule spaces units interval ns apart and lets the state run up to
-- tolerance = interval x slots ahead of now. GCRA's interval is
-- period / count as a double truncated (redis-cell's), the buckets' is
-- rounded up.
local function schedule(kind, limit, slots, count, period)
  local interval
  if kind == 'gcra' then
    interval = math.floor(period * SECOND / float(count))
    if interval < 1 then return nil, fail(GCRA_RATE) end
    interval = whole(interval)
  else
    local period_ns = mul(period, SECOND)
    if lt(period_ns, count) then return nil, fail(BUCKET_RATE) end
    local q, r = quorem(period_ns, count)
    if lt(0, r) then q = add(q, 1) end
    interval = q
  end
  local tolerance = mul(interval, slots)
  if not fits(tolerance) then
    return nil, fail(kind == 'gcra' and GCRA_OVERFLOW or BUCKET_OVERFLOW)
  end
  return {kind = kind, limit = limit, slots = slots, interval = interval, tolerance = tolerance}
end
-- apply takes units (a cost, or a refund below 0) at now from state (an
-- instant or nil, owed or not): the decision {limited, retry, at, write,
-- owed}, how far the state was ahead, how far it is ahead after, or an error.
local function apply(s, state, now, units, owed)
  local ahead, clamped = ahead_of(state, now, s.tolerance, owed)
  local d = {limited = false, retry = -1, write = clamped}
  if lt(s.slots, units) then
    d.limited, d.at = true, later(now, ahead)
    return d, ahead, ahead
  end
  units = imax(units, neg(s.slots))
  local cost = mul(s.interval, units)
  local nxt = add(ahead, cost)
  if le(0, units) and lt(s.tolerance, nxt) then
    d.retry = sub(ahead, sub(s.tolerance, cost))
    d.limited, d.at = true, later(now, ahead)
    return d, ahead, ahead
  end
  nxt = imax(nxt, 0)
  d.at = later(now, nxt)
  if d.at == nil then
    return nil, nil, nil, fail(s.kind == 'gcra' and GCRA_OVERFLOW or BUCKET_OVERFLOW)
  end
  d.write = d.write or lt(0, units) or (lt(units, 0) and lt(0, ahead))
  d.owed = lt(s.tolerance, nxt)
  return d, ahead, nxt
end
-- decide is one limit's decision with its five integers' parts; a reserve
-- of DEBT makes it a charge (schedule.Charge): taken past the tolerance.
local function decide(kind, s, state, now, units, reserve, owed)
  if lt(0, reserve) and le(0, units) then
    local d, ahead, nxt, err = decide(kind, s, state, now, sat_add(units, reserve), 0, owed)
    if err or d.limited then return d, ahead, nxt, err end
  end
  local d, ahead, nxt, err = apply(s, state, now, units, owed)
  if err then return nil, nil, nil, err end
  if reserve == DEBT and d.limited and lt(0, units) then
    nxt = add(ahead, mul(s.interval, units))
    d.at, d.write, d.owed = later(now, nxt), true, true
    if d.at == nil then -- past 2^63 - 1 ns: the debt stops there, unless the tolerance from now passes it too
      if later(now, s.tolerance) == nil then return nil, nil, nil, fail(s.kind == 'gcra' and GCRA_OVERFLOW or BUCKET_OVERFLOW) end
      d.at = LATEST; nxt = since(LATEST, now)
    end
    d.retry = sub(nxt, sub(s.tolerance, s.interval))
  end
  d.reset = nxt
  d.remaining = imin(imax(quo(sub(s.tolerance, nxt), s.interval), 0), s.limit)
  if kind == 'lb' then
    d.reset = d.limited and 0 or ahead -- the shaper's field 5: its delay
  end
  return d, ahead, nxt
end

local INSTANT_STATE = {gcra = GCRA_STATE, tb = BUCKET_STATE, lb = SHAPER_STATE}

-- new_schedule makes a family's schedule from its parsed arguments.
local function new_schedule(kind, v)
  if kind == 'gcra' then return schedule(kind, add(v[1], 1), add(v[1], 1), v[2], v[3]) end
  if kind == 'tb' then return schedule(kind, v[1], v[1], v[2], v[3]) end
  return schedule(kind, v[1], add(v[1], 1), v[2], v[3])
end
-- instant_limit runs one limit of an instant family on its key: the five
-- integers and the write to make, or an error.
local function instant_limit(kind, key, v, reserve, now, ms)
  local s, err = new_schedule(kind, v)
  if err then return nil, nil, err end
  local state, owed
  state, err, owed = load_instant(key, now, INSTANT_STATE[kind], s.tolerance, kind ~= 'lb')
  if err then return nil, nil, err end
  local d, _, _, derr = decide(kind, s, state, now, v[4], reserve, owed)
  if derr then return nil, nil, derr end
  local reply = five(d.limited, s.limit, d.remaining, d.retry, d.reset, ms)
  return reply, {key = key, existed = state ~= nil, at = d.at, write = d.write, owed = d.owed}
end
-- fast_instant is instant_limit and its write on plain numbers, for the
-- common call (a cost of 0 or more, no RESERVE: what fast_args reads) on
-- the common key (empty, or a state of 19 digits after 2015 that expires
-- and runs at most the tolerance ahead), while the interval and the
-- tolerance are below 2^53 ns (104 days): every step below is then exact
-- in a double, and so equal to the exact path's. It gives the reply (or
-- WRONGTYPE), or nil for any other call or key, which the exact path
-- decides; it writes only when it decides.
local function fast_instant(kind, key, v, now, ms, peek)
  local n1, count, period, units = v[1], v[2], v[3], v[4]
  local limit, slots, interval
  if kind == 'gcra' then
    limit = n1 + 1
    slots = limit
    interval = math.floor(period * SECOND / count) -- redis-cell's double
    if interval < 1 or interval >= TWO53 then return nil end
  else
    local period_ns = period * SECOND
    if period_ns >= TWO53 or period_ns < count then return nil end
    local r = math.fmod(period_ns, count)
    interval = (period_ns - r) / count
    if r > 0 then interval = interval + 1 end
    limit, slots = n1, n1
    if kind == 'lb' then slots = n1 + 1 end
  end
  local tolerance = interval * slots
  -- Within 105 days of 2262 a state may not fit 64 bits: the exact path.
  if tolerance >= TWO53 or now[1] >= MAX_SECONDS - 9100000 then return nil end
  local raw = redis.pcall('GET', key)
  local ahead = 0
  if raw then
    if type(raw) == 'table' then return fail(WRONGTYPE) end
    local s, ns = string.match(raw, '^(%d%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d%d%d%d)$')
    if not s or redis.call('PEXPIRETIME', key) < 0 then return nil end
    s, ns = tonumber(s), tonumber(ns)
    if s < MIN_STATE or s >= MAX_SECONDS then return nil end
    local ds = s - now[1]
    if ds > 0 or (ds == 0 and ns > now[2]) then
      if ds > 9000000 then return nil end
      ahead = ds * SECOND + (ns - now[2])
      if ahead > tolerance then return nil end -- a clock that stepped back
    end
  end
  local limited, retry, nxt, write = false, -1, ahead, false
  if units <= slots then
    local cost = interval * units -- at most the tolerance
    if ahead + cost > tolerance then
      limited, retry = true, ahead - (tolerance - cost)
    else
      nxt, write = ahead + cost, units > 0
    end
  else
    limited = true
  end
  local left = tolerance - nxt
  local remaining = (left - math.fmod(left, interval)) / interval
  local reset = nxt
  if kind ~= 'gcra' and remaining > limit then remaining = limit end
  if kind == 'lb' then
    reset = ahead
    if limited then reset = 0 end
  end
  if write and not peek then
    -- nxt > 0: SET the state at now + nxt, expiring then (rounded up to the ms)
    local r = math.fmod(nxt, SECOND)
    local s, ns = now[1] + (nxt - r) / SECOND, now[2] + r
    if ns >= SECOND then s, ns = s + 1, ns - SECOND end
    redis.call('SET', key, string.format('%d%09d', s, ns), 'PXAT', string.format('%d', s * 1000 + math.ceil(ns / 1000000)))
  end
  return {limited and 1 or 0, limit, remaining, fast_time(retry, ms), fast_time(reset, ms)}
end
-- instant_store makes an instant limit's write.
local function instant_store(w, now)
  store_instant(w.key, w.existed, now, w.at, w.write, w.owed)
end
