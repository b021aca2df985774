#!lua flags=no-writes
-- tb_peek.lua: generated from lua/src by `make lua`; edit the sources, not this file.

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

return instant_command("tb", "tb.peek", true)
