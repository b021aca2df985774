#!lua flags=no-writes
-- rl_peek.lua: generated from lua/src by `make lua`; edit the sources, not this file.

-- Exact integers. Lua numbers are doubles, exact only below 2^53, and the
-- module computes on 64-bit nanoseconds. An integer here is a Lua number
-- while its magnitude is below 2^53, else a table of base-10^7 limbs,
-- least significant first, with its sign in field s (1 or -1): a table is
-- always further from zero than any number. Every operation is exact at
-- any size; the common case stays a number, and the limb code is only
-- built (Redis's Lua builds a script's functions again on every call) when
-- a call meets a number that needs it.
local TWO53 = 9007199254740992
local B = 10000000

local limbs_made
local function limbs()
  if limbs_made then return limbs_made end
  local M = {}

  -- big returns the limbs of n (a number holding an integer of any size).
  local function big(n)
    if type(n) == 'table' then return n end
    local t = {s = 1}
    if n < 0 then t.s = -1; n = -n end
    if n >= TWO53 then
      -- Split exactly: n = hi * 2^26 + lo, both parts exact doubles.
      local hi = math.floor(n / 67108864)
      local lo = n - hi * 67108864
      local h, l = big(hi), big(lo)
      local carry = 0
      for i = 1, math.max(#h + 2, #l) do
        local v = (h[i] or 0) * 67108864 + (l[i] or 0) + carry
        local d = math.fmod(v, B)
        t[i] = d
        carry = (v - d) / B
      end
      while #t > 0 and t[#t] == 0 do t[#t] = nil end
      return t
    end
    local i = 1
    while n > 0 do
      local d = math.fmod(n, B)
      t[i] = d
      n = (n - d) / B
      i = i + 1
    end
    return t
  end

  -- small turns limbs back into a number when it is below 2^53. With at
  -- most three limbs each step is exact until the sum reaches 2^53, and a
  -- sum at or above 2^53 cannot round below it.
  local function small(t)
    local n = #t
    if n == 0 then return 0 end
    if n > 3 then return t end
    local v = 0
    for i = n, 1, -1 do v = v * B + t[i] end
    if v >= TWO53 then return t end
    return t.s * v
  end

  -- cmpmag compares magnitudes: -1, 0 or 1.
  local function cmpmag(a, b)
    if #a ~= #b then return #a < #b and -1 or 1 end
    for i = #a, 1, -1 do
      if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
    end
    return 0
  end

  local function addmag(a, b, s)
    local r, carry = {s = s}, 0
    for i = 1, math.max(#a, #b) do
      local v = (a[i] or 0) + (b[i] or 0) + carry
      if v >= B then r[i] = v - B; carry = 1 else r[i] = v; carry = 0 end
    end
    if carry > 0 then r[#r + 1] = carry end
    return r
  end

  -- submag is |a| - |b| for |a| >= |b|.
  local function submag(a, b, s)
    local r, borrow = {s = s}, 0
    for i = 1, #a do
      local v = a[i] - (b[i] or 0) - borrow
      if v < 0 then r[i] = v + B; borrow = 1 else r[i] = v; borrow = 0 end
    end
    while #r > 0 and r[#r] == 0 do r[#r] = nil end
    return r
  end

  local function mulmag(a, b, s)
    local r = {s = s}
    for i = 1, #a + #b do r[i] = 0 end
    for i = 1, #a do
      local carry, ai = 0, a[i]
      for j = 1, #b do
        local v = r[i + j - 1] + ai * b[j] + carry -- < 1e14 + 1e14 + 1e8
        local d = math.fmod(v, B)
        r[i + j - 1] = d
        carry = (v - d) / B
      end
      local k = i + #b
      while carry > 0 do
        local v = r[k] + carry
        local d = math.fmod(v, B)
        r[k] = d
        carry = (v - d) / B
        k = k + 1
      end
    end
    while #r > 0 and r[#r] == 0 do r[#r] = nil end
    return r
  end

  -- approx is a limb number as a double, within a few units in the last place.
  local function approx(t)
    local v = 0
    for i = #t, 1, -1 do v = v * B + t[i] end
    return v
  end

  -- divmag is |a| / |b| truncated and the remainder, b not zero: estimates
  -- from doubles, made a little low so that they never overshoot, then
  -- corrected exactly; each round gains about 40 bits.
  local function divmag(a, b)
    local q, r = {s = 1}, {s = 1}
    for i = 1, #a do r[i] = a[i] end
    local bd = approx(b)
    while cmpmag(r, b) >= 0 do
      local e = math.floor(approx(r) / bd * (1 - 2 ^ -40))
      if e < 1 then e = 1 end
      local eb = big(e)
      q = addmag(q, eb, 1)
      r = submag(r, mulmag(eb, b, 1), 1)
    end
    return q, r
  end

  function M.add(a, b)
    a, b = big(a), big(b)
    if a.s == b.s then return small(addmag(a, b, a.s)) end
    if cmpmag(a, b) >= 0 then return small(submag(a, b, a.s)) end
    return small(submag(b, a, b.s))
  end

  function M.mul(a, b)
    a, b = big(a), big(b)
    return small(mulmag(a, b, a.s * b.s))
  end

  function M.quorem(a, b)
    a, b = big(a), big(b)
    local q, r = divmag(a, b)
    q.s, r.s = a.s * b.s, a.s
    return small(q), small(r)
  end

  M.big, M.cmpmag, M.small = big, cmpmag, small

  function M.fmt(a)
    local parts = {a.s < 0 and '-' or '', string.format('%d', a[#a])}
    for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
    return table.concat(parts)
  end

  limbs_made = M
  return M
end

local function add(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local c = a + b
    if c < TWO53 and c > -TWO53 then return c end
  end
  return limbs().add(a, b)
end

local function neg(a)
  if type(a) == 'number' then return -a end
  local r = {s = -a.s}
  for i = 1, #a do r[i] = a[i] end
  return r
end

local function sub(a, b) return add(a, neg(b)) end

local function mul(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local c = a * b
    if c < TWO53 and c > -TWO53 then return c end
  end
  return limbs().mul(a, b)
end

-- quorem is a / b truncated toward zero and the remainder, with the sign
-- of a: Go's / and %. b is not zero.
local function quorem(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local r = math.fmod(a, b) -- exact
    return (a - r) / b, r
  end
  return limbs().quorem(a, b)
end

local function quo(a, b) return (quorem(a, b)) end

-- cmp compares two integers: -1, 0 or 1.
local function cmp(a, b)
  local ta, tb = type(a) == 'number', type(b) == 'number'
  if ta and tb then
    if a == b then return 0 end
    return a < b and -1 or 1
  end
  -- A table is further from zero than any number.
  if ta then return -b.s end
  if tb then return a.s end
  if a.s ~= b.s then return a.s < b.s and -1 or 1 end
  local c = limbs().cmpmag(a, b)
  if c == 0 then return 0 end
  return a.s * c
end

local function lt(a, b) return cmp(a, b) < 0 end
local function le(a, b) return cmp(a, b) <= 0 end
local function imax(a, b) if cmp(a, b) >= 0 then return a end return b end
local function imin(a, b) if cmp(a, b) <= 0 then return a end return b end

-- fmt writes an integer in decimal, as the module does.
local function fmt(a)
  if type(a) == 'number' then return string.format('%d', a) end
  return limbs().fmt(a)
end

-- The 64-bit range the module computes in: 2^63 - 1 and -2^63.
local MAXI = {s = 1, 4775807, 7203685, 92233}
local MINI = {s = -1, 4775808, 7203685, 92233}

-- parse reads a base-10 signed 64-bit integer as the module accepts it: an
-- optional sign, then digits, within the 64-bit range. nil otherwise.
local function parse(s)
  local sign, digits = string.match(s, '^([+-]?)0*(%d-)$')
  if not digits or (digits == '' and not string.match(s, '0$')) then return nil end
  if #digits <= 15 then
    local v = tonumber(digits) or 0
    if sign == '-' then return -v end
    return v
  end
  if #digits > 19 then return nil end
  local t, i = {s = 1}, 1
  for e = #digits, 1, -7 do
    t[i] = tonumber(string.sub(digits, math.max(1, e - 6), e))
    i = i + 1
  end
  local v = limbs().small(t)
  if sign == '-' then v = neg(v) end
  if lt(MAXI, v) or lt(v, MINI) then return nil end
  return v
end

-- fits reports whether an integer is within the 64-bit range.
local function fits(a) return le(MINI, a) and le(a, MAXI) end

-- whole is an integer held in a double of any size (a product or quotient
-- of doubles, floored) as an exact integer.
local function whole(n)
  if n < TWO53 and n > -TWO53 then return n end
  return limbs().big(n)
end

-- float is an integer as the nearest double, as Go's float64(int64) is.
local function float(a)
  if type(a) == 'number' then return a end
  return tonumber(fmt(a))
end

-- What every command shares with the module: argument syntax and its
-- errors, the clock, instants, replies, and reading a key.

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local SECOND = 1000000000
local MAX_SECONDS = 9223372036 -- the longest period or window: whole seconds of 64-bit ns
local MAX_LIMIT = 9007199254740991 -- 2^53 - 1: a reply's integers stay exact

local function fail(msg) return {err = msg} end

local function arity(name)
  return fail("ERR wrong number of arguments for '" .. name .. "' command")
end

-- quote shows untrusted input in an error as the module does: at most 32
-- bytes, printable ASCII as it is, every other byte as \xNN.
local function quote(s)
  local more = ''
  if #s > 32 then s = string.sub(s, 1, 32); more = '...' end
  s = string.gsub(s, '.', function(c)
    local b = string.byte(c)
    if c == '"' or c == '\\' then return '\\' .. c end
    if b < 32 or b > 126 then return string.format('\\x%02x', b) end
  end)
  return '"' .. s .. '"' .. more
end

local function isword(s, word) return string.upper(s) == word end

-- A syntax is {positional args, optional arg, default, reserve allowed};
-- an arg is {name, min, max, seconds} with min and max exact integers.
local function range_error(a, prefix)
  if a.seconds then
    return fail('ERR ' .. prefix .. a.name .. ' must be whole seconds from ' .. fmt(a.min) .. ' to ' .. fmt(a.max))
  end
  return fail('ERR ' .. prefix .. a.name .. ' must be an integer from ' .. fmt(a.min) .. ' to ' .. fmt(a.max))
end

local function parse_arg(a, s)
  local v = parse(s)
  if v == nil or lt(v, a.min) or lt(a.max, v) then return nil end
  return v
end

-- parse_reserve reads RESERVE's n, 0 to the limit.
local function parse_reserve(s, limit, prefix)
  local n = parse(s)
  if n == nil or lt(n, 0) or lt(limit, n) then
    return nil, fail('ERR ' .. prefix .. 'RESERVE must be an integer from 0 to ' .. fmt(limit) .. ' (the limit)')
  end
  return n
end

-- parse_options reads MS, RESERVE n (when allowed) and EACH (when each)
-- from args[i..]: ms, the index of RESERVE's n (0 if none), EACH, or an error.
local function parse_options(args, i, allowed, names, each)
  local ms, reserve_at, each_seen = false, 0, false
  while i <= #args do
    local a = args[i]
    if isword(a, 'MS') then
      if ms then return nil, nil, nil, fail('ERR the option MS is given twice') end
      ms = true
    elseif each and isword(a, 'EACH') then
      if each_seen then return nil, nil, nil, fail('ERR the option EACH is given twice') end
      each_seen = true
    elseif allowed and isword(a, 'RESERVE') then
      if reserve_at > 0 then return nil, nil, nil, fail('ERR the option RESERVE is given twice') end
      if i + 1 > #args then
        return nil, nil, nil, fail('ERR RESERVE needs a number: RESERVE n, n from 0 to the limit')
      end
      i = i + 1
      reserve_at = i
    else
      return nil, nil, nil, fail('ERR unknown option ' .. quote(a) .. ': the options are ' .. names)
    end
    i = i + 1
  end
  return ms, reserve_at, each_seen
end

-- parse_one reads a command of one key: args are ARGV (after the key).
-- It returns the values (positional, then the cost), ms and the reserve,
-- or an error reply.
local function parse_one(syn, args, name)
  local np = #syn.positional
  if #args < np or #args + 2 > 16 then return nil, nil, nil, arity(name) end
  local v = {}
  for j, a in ipairs(syn.positional) do
    v[j] = parse_arg(a, args[j])
    if v[j] == nil then return nil, nil, nil, range_error(a, '') end
  end
  local i = np + 1
  v[np + 1] = syn.def
  if i <= #args and not isword(args[i], 'MS') and not isword(args[i], 'RESERVE') then
    v[np + 1] = parse_arg(syn.optional, args[i])
    if v[np + 1] == nil then return nil, nil, nil, range_error(syn.optional, '') end
    i = i + 1
  end
  local names = syn.reserve and 'MS and RESERVE n' or 'MS'
  local ms, reserve_at, _, err = parse_options(args, i, syn.reserve, names, false)
  if err then return nil, nil, nil, err end
  local reserve = 0
  if reserve_at > 0 then
    reserve, err = parse_reserve(args[reserve_at], syn.limit(v), '')
    if err then return nil, nil, nil, err end
  end
  return v, ms, reserve
end

-- The clock: the server's TIME, as an instant {s, ns}.
local function clock()
  local t = redis.call('TIME')
  return {tonumber(t[1]), tonumber(t[2]) * 1000}
end

-- Instants are {seconds, nanoseconds} since the Unix epoch: a nanosecond
-- time does not fit a double, its two parts do.
local function since(a, b) -- a - b, an exact integer of nanoseconds
  return add(mul(a[1] - b[1], SECOND), a[2] - b[2])
end

local function later(a, d) -- a + d for 0 <= d; nil past the 64-bit range
  local q, r = quorem(d, SECOND)
  local s, ns = a[1] + float(q), a[2] + r
  if ns >= SECOND then s, ns = s + 1, ns - SECOND end
  if s > MAX_SECONDS or (s == MAX_SECONDS and ns > 854775807) then return nil end
  return {s, ns}
end

local function after(a, b) -- a > b
  return a[1] > b[1] or (a[1] == b[1] and a[2] > b[2])
end

local function instant_string(a) return string.format('%d%09d', a[1], a[2]) end

-- ceil_ms is an instant in Unix ms, rounded up.
local function ceil_ms(a) return a[1] * 1000 + math.ceil(a[2] / 1000000) end

-- reply_time rounds a time of nanoseconds for the reply: milliseconds
-- rounded up with MS, else whole seconds plus one when the remainder has
-- a non-zero millisecond part (redis-cell's rounding); -1 stays -1.
local function reply_time(d, ms)
  if lt(d, 0) then return -1 end
  if ms then
    local q, r = quorem(d, 1000000)
    if lt(0, r) then q = add(q, 1) end
    return float(q)
  end
  local q, r = quorem(d, SECOND)
  if r >= 1000000 then q = add(q, 1) end
  return float(q)
end

local function five(limited, limit, remaining, retry, reset, ms)
  return {limited and 1 or 0, float(limit), float(remaining), reply_time(retry, ms), reply_time(reset, ms)}
end

-- read_string returns what the module reads of a key whose state is a
-- string: its type ('none', 'string' or 'other'), its absolute expiry in
-- Unix ms (-1: none) and its value. One GET tells all three types apart.
local function read_string(key)
  local v = redis.pcall('GET', key)
  if not v then return 'none', -1 end
  if type(v) == 'table' then return 'other', -1 end
  return 'string', redis.call('PEXPIRETIME', key), v
end

local function other_data(state, why)
  return fail('ERR the key holds other data, not ' .. state .. ': ' .. why ..
    '; the limiter changed nothing (use a key prefix per limiter)')
end

-- check_key refuses a key of another type, and one without an expiry.
local function check_key(kind, expire, want, state)
  if kind ~= 'none' and kind ~= want then return fail(WRONGTYPE) end
  if kind == want and expire < 0 then
    return other_data(state, 'it has no expiry, and limiter keys always expire')
  end
end

local MIN_STATE = 1420070400 -- 2015-01-01, in seconds

-- split_instant reads a stored instant as the module does (digits only,
-- leading zeros allowed, at most 2^63 - 1) into {seconds, nanoseconds},
-- straight from its digits: each part is exact as a double.
local function split_instant(s)
  local d = string.match(s, '^0*(%d+)$')
  if d == nil then return nil end
  if #d > 19 or (#d == 19 and d > '9223372036854775807') then return nil end
  if #d <= 9 then return {0, tonumber(d)} end
  return {tonumber(string.sub(d, 1, -10)), tonumber(string.sub(d, -9))}
end

-- load_instant reads an instant state: nil for an empty key, the instant,
-- or an error reply.
local function load_instant(key, now, state, tolerance)
  local kind, expire, s = read_string(key)
  local err = check_key(kind, expire, 'string', state)
  if err then return nil, err end
  if kind == 'none' then return nil end
  local at = split_instant(s)
  if at == nil then return nil, other_data(state, 'not a decimal integer') end
  if at[1] < MIN_STATE then return nil, other_data(state, 'an instant before 2015') end
  -- An instant further ahead than the state can be, more than a second
  -- after the key's own expiry, was not written by a limiter.
  if after(at, now) and lt(tolerance, since(at, now)) then
    local e = {math.floor(expire / 1000), math.fmod(expire, 1000) * 1000000}
    if after({at[1] - 1, at[2]}, e) then
      return nil, other_data(state, 'an instant far past the key\'s own expiry')
    end
  end
  return at
end

-- store_instant writes an instant state when write is set: SET with an
-- expiry at the instant, or DEL when it has come (the limiter has no work
-- left).
local function store_instant(key, existed, now, at, write)
  if not write then return end
  if after(at, now) then
    redis.call('SET', key, instant_string(at), 'PXAT', string.format('%d', ceil_ms(at)))
  elseif existed then
    redis.call('DEL', key)
  end
end

-- ahead is how far state runs ahead of now, at most limit, and whether it
-- had to be cut to limit (a clock that stepped back).
local function ahead_of(state, now, limit)
  if state == nil or not after(state, now) then return 0, false end
  local d = since(state, now)
  if lt(limit, d) then return limit, true end
  return d, false
end

local function sat_add(a, b)
  local c = add(a, b)
  if lt(MAXI, c) then return MAXI end
  return c
end

local WINDOW_OVERFLOW = 'ERR the window overflows 64-bit nanoseconds: the window is too long'

-- parse_count reads a decimal count as the module reads an instant:
-- digits only, within 64 bits.
local function parse_count(s)
  if not string.match(s, '^%d') then return nil end
  return parse(s)
end

-- GCRA, the token bucket and the shaper: one instant of state each (see
-- the gcra and bucket packages, which this follows step for step).

-- instant_syntax is a family's arguments (built for the one family a
-- script runs: every table costs on every call).
local function instant_syntax(kind)
  if kind == 'gcra' then
    return {
      positional = {
        {name = 'max_burst', min = 0, max = MAX_LIMIT - 1},
        {name = 'count', min = 1, max = MAXI},
        {name = 'period', min = 1, max = MAX_SECONDS, seconds = true},
      },
      optional = {name = 'quantity', min = MINI, max = MAXI},
      def = 1, reserve = true,
      limit = function(v) return add(v[1], 1) end,
    }
  elseif kind == 'tb' then
    return {
      positional = {
        {name = 'capacity', min = 1, max = MAX_LIMIT},
        {name = 'refill_tokens', min = 1, max = MAXI},
        {name = 'refill_period', min = 1, max = MAX_SECONDS, seconds = true},
      },
      optional = {name = 'tokens', min = MINI, max = MAXI},
      def = 1, reserve = true,
      limit = function(v) return v[1] end,
    }
  end
  return {
    positional = {
      {name = 'capacity', min = 0, max = MAX_LIMIT},
      {name = 'leak_count', min = 1, max = MAXI},
      {name = 'leak_period', min = 1, max = MAX_SECONDS, seconds = true},
    },
    optional = {name = 'quantity', min = 0, max = MAXI},
    def = 1, reserve = false,
  }
end

local GCRA_STATE = 'GCRA state (a Unix time in nanoseconds)'
local BUCKET_STATE = 'token bucket state (a Unix time in nanoseconds)'
local SHAPER_STATE = 'shaper state (a Unix time in nanoseconds)'

local GCRA_RATE = 'ERR count must be at most period x 1000000000 (the interval period/count must be at least 1 ns)'
local GCRA_OVERFLOW = 'ERR arguments overflow 64-bit nanoseconds: (max_burst + 1) x period / count is too long (the limiter\'s state would lie beyond the year 2262)'
local BUCKET_RATE = 'ERR the rate is above one per nanosecond: the count must be at most period x 1000000000'
local BUCKET_OVERFLOW = 'ERR arguments overflow 64-bit nanoseconds: capacity x period / count is too long (the state would lie beyond the year 2262)'

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
-- instant or nil): the decision {limited, retry, at, write}, how far the
-- state was ahead, how far it is ahead after, or an error.
local function apply(s, state, now, units)
  local ahead, clamped = ahead_of(state, now, s.tolerance)
  local d = {limited = false, retry = -1, write = clamped}
  if lt(s.slots, units) then
    d.limited, d.at = true, later(now, ahead)
    return d, ahead, ahead
  end
  units = imax(units, neg(s.slots))
  local cost = mul(s.interval, units)
  local nxt = add(ahead, cost)
  if lt(s.tolerance, nxt) then
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
  return d, ahead, nxt
end

-- decide is one limit's decision with its five integers' parts.
local function decide(kind, s, state, now, units, reserve)
  if lt(0, reserve) and le(0, units) then
    local d, ahead, nxt, err = decide(kind, s, state, now, sat_add(units, reserve), 0)
    if err or d.limited then return d, ahead, nxt, err end
  end
  local d, ahead, nxt, err = apply(s, state, now, units)
  if err then return nil, nil, nil, err end
  d.reset = nxt
  if kind == 'gcra' then
    d.remaining = quo(sub(s.tolerance, nxt), s.interval)
  else
    d.remaining = imin(imax(quo(sub(s.tolerance, nxt), s.interval), 0), s.limit)
  end
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
  local state
  state, err = load_instant(key, now, INSTANT_STATE[kind], s.tolerance)
  if err then return nil, nil, err end
  local d, _, _, derr = decide(kind, s, state, now, v[4], reserve)
  if derr then return nil, nil, derr end
  local reply = five(d.limited, s.limit, d.remaining, d.retry, d.reset, ms)
  return reply, {key = key, existed = state ~= nil, at = d.at, write = d.write}
end

-- instant_command is GCRA.THROTTLE, TB.TAKE, LB.ENQUEUE and their peeks.
local function instant_command(kind, name, peek)
  if #KEYS ~= 1 then return fail('ERR this script takes one key: call it with numkeys 1') end
  local v, ms, reserve, err = parse_one(instant_syntax(kind), ARGV, name)
  if err then return err end
  local now = clock()
  local reply, w
  reply, w, err = instant_limit(kind, KEYS[1], v, reserve, now, ms)
  if err then return err end
  if not peek then store_instant(w.key, w.existed, now, w.at, w.write) end
  return reply
end

-- The sliding window counter and the fixed window: a string state each
-- (see the window package, which this follows step for step).


local window_syntax = {
  positional = {
    {name = 'limit', min = 1, max = MAX_LIMIT},
    {name = 'window', min = 1, max = MAX_SECONDS, seconds = true},
  },
  optional = {name = 'cost', min = 0, max = MAXI},
  def = 1, reserve = true,
  limit = function(v) return v[1] end,
}

local COUNTER_STATE = 'sliding window state (index:current:previous)'
local FIXED_STATE = 'fixed window state (a count)'

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
-- expire ms) at now: decision, the count to store, the window's end.
local function fixed_hit(L, window, count, expire, now, cost)
  local d = {limited = false, retry = -1, write = false, reset = 0}
  local start, stop = window_at(now, window)
  if not in_range(stop) then return nil, nil, nil, fail(WINDOW_OVERFLOW) end
  if lt(0, count) and expire <= start * 1000 then count = 0 end
  d.write = lt(0, count) and expire > stop * 1000
  local left = since({stop, 0}, now)
  local n = add(count, cost)
  if lt(L, cost) or not fits(n) or lt(L, n) then
    d.limited = true
    if le(cost, L) then d.retry = left end
    n = count
  else
    d.write = d.write or lt(0, cost)
  end
  d.remaining = imax(sub(L, n), 0)
  if lt(0, n) then d.reset = left end
  return d, n, stop
end

-- sliding_hit is the sliding window counter's decision on counts c at now:
-- decision, the counts to store, when the key's work ends.
local function sliding_hit(L, window, c, now, cost)
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
  if lt(L, cost) or not fits(est) or not fits(total) or lt(L, total) then
    d.limited = true
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

-- window_limit runs one limit of a window family on its key: the five
-- integers and the write to make ({key, set = value, at = instant} or
-- {key, del = true}), or an error.
local function window_limit(kind, key, v, reserve, now, ms)
  local L, window, cost = v[1], v[2], v[3]
  local kindof, expire, raw = read_string(key)
  local state = kind == 'sw' and COUNTER_STATE or FIXED_STATE
  local err = check_key(kindof, expire, 'string', state)
  if err then return nil, nil, err end
  local d, n, at
  if kind == 'fw' then
    local count = 0
    if raw then
      count = parse_count(raw)
      if count == nil then return nil, nil, other_data(state, 'not a decimal integer') end
    end
    if lt(0, reserve) then
      d, n, at, err = fixed_hit(L, window, count, expire, now, sat_add(cost, reserve))
      if err then return nil, nil, err end
    end
    if not d or not d.limited then
      d, n, at, err = fixed_hit(L, window, count, expire, now, cost)
      if err then return nil, nil, err end
    end
    local reply = five(d.limited, L, d.remaining, d.retry, d.reset, ms)
    if d.write then return reply, {key = key, set = fmt(n), at = {at, 0}} end
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
  if lt(0, reserve) then
    d, n, at, err = sliding_hit(L, window, c, now, sat_add(cost, reserve))
    if err then return nil, nil, err end
  end
  if not d or not d.limited then
    d, n, at, err = sliding_hit(L, window, c, now, cost)
    if err then return nil, nil, err end
  end
  local reply = five(d.limited, L, d.remaining, d.retry, d.reset, ms)
  if not d.write then return reply, {key = key} end
  if not after(at, now) then return reply, {key = key, del = raw ~= nil} end
  return reply, {key = key, set = fmt(n.index) .. ':' .. fmt(n.current) .. ':' .. fmt(n.previous), at = at}
end

-- store applies one key's write.
local function store(w)
  if w.set then
    redis.call('SET', w.key, w.set, 'PXAT', string.format('%d', ceil_ms(w.at)))
  elseif w.del then
    redis.call('DEL', w.key)
  end
end

-- window_command is SW.HIT, FW.HIT and their peeks.
local function window_command(kind, name, peek)
  if #KEYS ~= 1 then return fail('ERR this script takes one key: call it with numkeys 1') end
  local v, ms, reserve, err = parse_one(window_syntax, ARGV, name)
  if err then return err end
  local now = clock()
  local reply, w
  reply, w, err = window_limit(kind, KEYS[1], v, reserve, now, ms)
  if err then return err end
  if not peek then store(w) end
  return reply
end

-- The sliding log: a sorted set, one entry per admitted unit, member
-- "<score>-<n>", scored with its time in Unix microseconds (see the window
-- package's SlidingLog and the module's runSlidingLog).

local LOG_STATE = 'a sliding log (members <score>-<n>, scored in Unix microseconds)'
local MAX_SCORE = 9007199254740992 -- 2^53 µs, the year 2255

local function log_syntax()
  return {
    positional = {
      {name = 'limit', min = 1, max = 100000},
      {name = 'window', min = 1, max = MAX_SECONDS, seconds = true},
    },
    optional = {name = 'cost', min = 0, max = MAXI},
    def = 1, reserve = true,
    limit = function(v) return v[1] end,
  }
end

-- read_zset returns what the module reads of a key whose state is a sorted
-- set: its type ('none', 'zset' or 'other'), expiry (Unix ms, -1: none)
-- and size.
local function read_zset(key)
  local n = redis.pcall('ZCARD', key)
  if type(n) == 'table' then return 'other', -1, 0 end
  if n == 0 then return 'none', -1, 0 end
  return 'zset', redis.call('PEXPIRETIME', key), n
end

-- state_score: a whole number of Unix µs from 2015 to 2^53.
local function state_score(us)
  return us >= MIN_STATE * 1000000 and us < MAX_SCORE and us == math.floor(us)
end

-- log_entry reports an entry the log wrote: "<score>-<n>", at most 63
-- bytes, its score digits (no leading zero) equal to its score.
local function log_entry(member, score)
  if #member > 63 or not state_score(score) then return false end
  local a, b = string.match(member, '^([^-]*)%-(.*)$')
  if not a or a == '' or string.sub(a, 1, 1) == '0' then return false end
  local us = parse_count(a)
  return us ~= nil and cmp(us, score) == 0 and parse_count(b) ~= nil
end

-- score_ns is a score (µs, a double) in ns, as the module converts it:
-- saturated at 2^53 µs, and nil (none) at or below -2^53 or for NaN.
local function score_ns(us)
  if us ~= us or us <= -MAX_SCORE then return nil end
  if us >= MAX_SCORE then us = MAX_SCORE end
  if us < 0 then us = math.ceil(us) else us = math.floor(us) end
  return mul(us, 1000)
end

local function now_ns(now) return add(mul(now[1], SECOND), now[2]) end

-- log_hit is the log's decision at now: {limited, retry, remaining, reset,
-- write, redate, expire (ns), add (entries)} or an error.
local function log_hit(key, size, L, window, now, cost, cutoff_us)
  local W = mul(window, SECOND)
  local now_us = now[1] * 1000000 + math.floor(now[2] / 1000)
  local n = now_ns(now)
  local d = {limited = false, retry = -1, write = false, redate = false, add = 0}
  local live = 0
  if size > 0 then live = redis.call('ZCOUNT', key, '(' .. fmt(cutoff_us), '+inf') end
  local newest = nil
  if size > 0 then
    local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    newest = score_ns(tonumber(last[2]))
  end
  if newest ~= nil and lt(n, newest) then
    newest, d.redate, d.write = n, true, true
  end
  local total = add(live, cost)
  if lt(L, cost) or lt(L, total) then
    d.limited = true
    if le(cost, L) then
      local k = sub(total, L)
      local r = redis.call('ZRANGE', key, '(' .. fmt(cutoff_us), '+inf', 'BYSCORE', 'LIMIT', fmt(sub(k, 1)), '1', 'WITHSCORES')
      local nth = r[2] and score_ns(tonumber(r[2])) or nil
      if nth == nil or lt(n, nth) then nth = n end
      d.retry = sub(add(nth, W), n)
    end
    total = live
  elseif lt(0, cost) then
    d.write, newest, d.add = true, n, cost
  end
  d.remaining = imin(imax(sub(L, total), 0), L)
  d.reset = 0
  if lt(0, total) then
    d.expire = add(newest, W)
    if not fits(d.expire) then return nil, fail(WINDOW_OVERFLOW) end
    d.reset = sub(d.expire, n)
  else
    d.expire = n
  end
  return d
end

-- log_limit runs a sliding log on its key: the five integers and the write
-- to make, or an error.
local function log_limit(key, v, reserve, now, ms)
  local L, window, cost = v[1], v[2], v[3]
  local kind, expire, size = read_zset(key)
  local err = check_key(kind, expire, 'zset', LOG_STATE)
  if err then return nil, nil, err end
  if kind == 'zset' then
    local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
    local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if not log_entry(first[1], tonumber(first[2])) or not log_entry(last[1], tonumber(last[2])) then
      return nil, nil, other_data(LOG_STATE, 'its members are not the log\'s own')
    end
  end
  -- cutoff = now - window, in µs rounded down (the window is whole seconds)
  local cutoff_us = sub(now[1] * 1000000 + math.floor(now[2] / 1000), mul(window, 1000000))
  local d
  if lt(0, reserve) then
    d, err = log_hit(key, size, L, window, now, sat_add(cost, reserve), cutoff_us)
    if err then return nil, nil, err end
  end
  if not d or not d.limited then
    d, err = log_hit(key, size, L, window, now, cost, cutoff_us)
    if err then return nil, nil, err end
  end
  local reply = five(d.limited, L, d.remaining, d.retry, d.reset, ms)
  if not d.write then return reply, {key = key} end
  return reply, {key = key, log = true, cutoff = cutoff_us, redate = d.redate, add = d.add,
    score = now[1] * 1000000 + math.floor(now[2] / 1000), expire = d.expire}
end

-- store_log writes the log as the module does: remove the entries that
-- left the window, move those dated after now to now (a clock that stepped
-- back), add the new entries "<score>-<n>" numbered from the set's size,
-- skipping members that exist, and expire the key at its newest entry's
-- end, rounded up to the ms.
local function store_log(w)
  redis.call('ZREMRANGEBYSCORE', w.key, '-inf', fmt(w.cutoff))
  local moved = 0
  local score = string.format('%d', w.score)
  if w.redate then moved = redis.call('ZREMRANGEBYSCORE', w.key, '(' .. score, '+inf') end
  local want = add(w.add, moved)
  local seq = redis.call('ZCARD', w.key)
  while lt(0, want) do
    local batch = {w.key, 'NX'}
    local k = float(imin(want, 64))
    for i = 0, k - 1 do
      batch[#batch + 1] = score
      batch[#batch + 1] = score .. '-' .. string.format('%d', seq + i)
    end
    seq = seq + k
    want = sub(want, redis.call('ZADD', unpack(batch)))
  end
  local q, r = quorem(w.expire, 1000000)
  if lt(0, r) then q = add(q, 1) end
  redis.call('PEXPIREAT', w.key, fmt(q))
end

-- log_command is SL.HIT and SL.PEEK.
local function log_command(_, name, peek)
  if #KEYS ~= 1 then return fail('ERR this script takes one key: call it with numkeys 1') end
  local v, ms, reserve, err = parse_one(log_syntax(), ARGV, name)
  if err then return err end
  local now = clock()
  local reply, w
  reply, w, err = log_limit(KEYS[1], v, reserve, now, ms)
  if err then return err end
  if not peek and w.log then store_log(w) end
  return reply
end

-- RL.ALL and RL.PEEK: several limits in one decision (see the module's
-- all.go, which this follows step for step). Every limit must admit or
-- nothing is taken; the reply is the deciding limit's five integers and
-- its position, and with EACH every limit's own five after them.

local FAMILIES = {'GCRA', 'TB', 'LB', 'SW', 'FW', 'SL'}

local function family_named(s)
  local u = string.upper(s)
  for _, f in ipairs(FAMILIES) do
    if u == f then return string.lower(f) end
  end
end

local function family_syntax(f)
  if f == 'gcra' or f == 'tb' then return instant_syntax(f) end
  if f == 'sl' then return log_syntax() end
  return window_syntax
end

local function arg_names(syn)
  local names = {}
  for _, a in ipairs(syn.positional) do names[#names + 1] = a.name end
  names[#names + 1] = syn.optional.name
  return table.concat(names, ' ')
end

-- parse_all reads the limiters after the keys, and the options: the
-- limits ({family, v}), ms, each, or an error, in the module's order.
local function parse_all(name)
  local n = #KEYS
  if 2 + n + #ARGV > 128 then return nil, nil, nil, arity(name) end
  if n < 1 or n > 16 then return nil, nil, nil, fail('ERR numkeys must be an integer from 1 to 16') end
  for a = 1, n do
    for b = a + 1, n do
      if KEYS[a] == KEYS[b] then
        return nil, nil, nil, fail('ERR key ' .. quote(KEYS[a]) .. ' is named twice: each limiter needs a key of its own')
      end
    end
  end
  local lims, i = {}, 1
  for j = 1, n do
    local w = ARGV[i]
    if w == nil or isword(w, 'MS') or isword(w, 'RESERVE') then
      return nil, nil, nil, fail('ERR numkeys is ' .. n .. ' but ' .. (j - 1) .. ' limiters follow the keys')
    end
    local f = family_named(w)
    if f == nil then
      return nil, nil, nil, fail('ERR unknown limiter ' .. quote(w) .. ' for key ' .. j .. ': the limiters are GCRA, TB, SW, FW and SL')
    elseif f == 'lb' then
      return nil, nil, nil, fail('ERR limiter ' .. j .. ': LB is a shaper (it answers with a delay) and is not part of RL.ALL')
    end
    local syn = family_syntax(f)
    local words = #syn.positional + 1
    if i + words > #ARGV then
      return nil, nil, nil, fail('ERR limiter ' .. j .. ' (' .. string.upper(f) .. ') takes ' .. words .. ' arguments: ' .. arg_names(syn))
    end
    local prefix = 'limiter ' .. j .. ' (' .. string.upper(f) .. '): '
    local v = {}
    for k, a in ipairs(syn.positional) do
      v[k] = parse_arg(a, ARGV[i + k])
      if v[k] == nil then return nil, nil, nil, range_error(a, prefix) end
    end
    v[words] = parse_arg(syn.optional, ARGV[i + words])
    if v[words] == nil then return nil, nil, nil, range_error(syn.optional, prefix) end
    lims[j] = {family = f, v = v, reserve = 0, syn = syn, prefix = prefix}
    i = i + 1 + words
  end
  if i <= #ARGV and family_named(ARGV[i]) then
    return nil, nil, nil, fail('ERR numkeys is ' .. n .. ' but more limiters follow')
  end
  local ms, reserve_at, each, err = parse_options(ARGV, i, true, 'MS, RESERVE n and EACH', true)
  if err then return nil, nil, nil, err end
  if reserve_at > 0 then
    for _, l in ipairs(lims) do
      l.reserve, err = parse_reserve(ARGV[reserve_at], l.syn.limit(l.v), l.prefix)
      if err then return nil, nil, nil, err end
    end
  end
  -- One call adds at most 100000 sliding-log entries (the module's maxLogAdd).
  local entries = 0
  for _, l in ipairs(lims) do
    if l.family == 'sl' and not lt(l.v[1], l.v[3]) then entries = entries + l.v[3] end
  end
  if entries > 100000 then
    return nil, nil, nil, fail('ERR the sliding logs of one call may add at most 100000 entries, not ' .. fmt(entries) .. ': split the call')
  end
  return lims, ms, each
end

-- run_limit runs one limit on its key: five integers and a write, or an
-- error naming the limiter and its key.
local function run_limit(j, l, key, v, reserve, now, ms)
  local reply, w, err
  if l.family == 'gcra' or l.family == 'tb' then
    reply, w, err = instant_limit(l.family, key, v, reserve, now, ms)
    if w then w.instant = true end
  elseif l.family == 'sl' then
    reply, w, err = log_limit(key, v, reserve, now, ms)
  else
    reply, w, err = window_limit(l.family, key, v, reserve, now, ms)
  end
  if err then
    local where = 'limiter ' .. j .. ' (' .. string.upper(l.family) .. ', key ' .. quote(key) .. ')'
    if err.err == WRONGTYPE then
      err = fail('WRONGTYPE ' .. where .. ': the key holds the wrong kind of value')
    elseif string.sub(err.err, 1, 4) == 'ERR ' then
      err = fail('ERR ' .. where .. ': ' .. string.sub(err.err, 5))
    end
  end
  return reply, w, err
end

-- later reports whether retry a is later than b: -1 (never) is the latest.
local function later_retry(a, b)
  if b == -1 then return false end
  return a == -1 or a > b
end

local function all_command(_, name, peek)
  local lims, ms, each, err = parse_all(name)
  if err then return err end
  local now = clock()
  local reps, writes = {}, {}
  for j, l in ipairs(lims) do
    reps[j], writes[j], err = run_limit(j, l, KEYS[j], l.v, l.reserve, now, ms)
    if err then return err end
  end
  local deciding = nil
  for j = 1, #lims do
    if reps[j][1] == 1 and (deciding == nil or later_retry(reps[j][4], reps[deciding][4])) then deciding = j end
  end
  if deciding then
    -- Nothing is taken; a limit that admitted still stores a state a
    -- stepped-back clock left too far ahead: run it at cost 0.
    for j, l in ipairs(lims) do
      if reps[j][1] == 0 then
        local v = {}
        for k = 1, #l.v do v[k] = l.v[k] end
        v[#v] = 0
        reps[j], writes[j], err = run_limit(j, l, KEYS[j], v, 0, now, ms)
        if err then return err end
      end
    end
  else
    deciding = 1
    for j = 2, #lims do
      if reps[j][3] < reps[deciding][3] then deciding = j end
    end
  end
  local reply = {reps[deciding][1], reps[deciding][2], reps[deciding][3], reps[deciding][4], reps[deciding][5], deciding - 1}
  if each then
    for j = 1, #lims do
      for k = 1, 5 do reply[#reply + 1] = reps[j][k] end
    end
  end
  if not peek then
    for _, w in ipairs(writes) do
      if w.instant then
        store_instant(w.key, w.existed, now, w.at, w.write)
      elseif w.log then
        store_log(w)
      else
        store(w)
      end
    end
  end
  return reply
end

return all_command("all", "rl.peek", true)
