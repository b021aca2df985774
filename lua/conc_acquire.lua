#!lua
-- conc_acquire.lua: generated from lua/src by `make lua`; edit the sources, not this file.

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

-- The concurrency limiter: a sorted set, member the holder's id, score the
-- end of its lease in Unix µs, in a key that expires at the whole second
-- after its latest lease (see the conc package and the module's conc.go,
-- which this follows step for step).

local CONC_STATE = 'concurrency state (holder ids scored with their lease\'s end in Unix microseconds)'
local CONC_SWEEP = 64

-- lease_expiry is the key's expiry (Unix ms) for a latest lease ending at
-- ns: the whole second at or after it.
local function lease_expiry(ns)
  local q, r = quorem(ns, SECOND)
  if lt(0, r) then q = add(q, 1) end
  return mul(q, 1000)
end

-- parse_conc reads CONC.ACQUIRE (op 'acquire'), CONC.PEEK or CONC.RELEASE:
-- {limit, lease, id, reserve, ms} or an error.
local function parse_conc(op, name)
  local first = ({acquire = 4, peek = 2, release = 2})[op] -- the first option in ARGV
  local nargs = 2 + #ARGV
  if nargs < first + 1 or nargs > 16 or (op == 'release' and nargs ~= 3) then return nil, arity(name) end
  local c = {reserve = 0, ms = false}
  local limit_arg = {name = 'limit', min = 1, max = 100000}
  if op ~= 'release' then
    c.limit = parse_arg(limit_arg, ARGV[1])
    if c.limit == nil then return nil, range_error(limit_arg, '') end
  end
  if op == 'acquire' then
    local lease_arg = {name = 'lease', min = 1, max = MAX_SECONDS, seconds = true}
    c.lease = parse_arg(lease_arg, ARGV[2])
    if c.lease == nil then return nil, range_error(lease_arg, '') end
    c.id = ARGV[3]
  elseif op == 'release' then
    c.id = ARGV[1]
  end
  if c.id and (#c.id < 1 or #c.id > 128) then
    return nil, fail('ERR id must be 1 to 128 bytes (a request id), not ' .. #c.id)
  end
  local ms, reserve_at, _, err = parse_options(ARGV, first, true, 'MS and RESERVE n', false)
  if err then return nil, err end
  c.ms = ms
  if reserve_at > 0 then
    c.reserve, err = parse_reserve(ARGV[reserve_at], c.limit, '')
    if err then return nil, err end
  end
  return c
end

-- lease_ns is a score (µs) in ns; none is 0.
local function lease_ns(score)
  if score == nil then return 0 end
  return score_ns(score) or MINI
end

-- read_conc checks the key holds a concurrency state or nothing: its
-- {kind, expire, size, newest = {member, score}} or an error.
local function read_conc(key)
  local kind, expire, size = read_zset(key)
  local err = check_key(kind, expire, 'zset', CONC_STATE)
  if err then return nil, err end
  local k = {kind = kind, expire = expire, size = size}
  if kind ~= 'zset' then return k end
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  local fs, ls = tonumber(first[2]), tonumber(last[2])
  if #first[1] < 1 or #first[1] > 128 or not state_score(fs) or #last[1] < 1 or #last[1] > 128 or not state_score(ls) then
    return nil, other_data(CONC_STATE, 'its members are not holder ids of 1 to 128 bytes scored with a lease\'s end')
  end
  if cmp(lease_expiry(mul(ls, 1000)), expire) ~= 0 then
    return nil, other_data(CONC_STATE, 'the key does not expire with its latest lease')
  end
  k.newest = {last[1], ls}
  return k
end

-- holder is the caller's lease's end and the latest other lease's end
-- (ns, 0 for none).
local function holder(key, k, id)
  if k.kind ~= 'zset' then return 0, 0 end
  if k.newest[1] == id then
    local prev = redis.call('ZRANGE', key, '-2', '-2', 'WITHSCORES')
    return lease_ns(k.newest[2]), lease_ns(tonumber(prev[2]))
  end
  local own = redis.call('ZSCORE', key, id)
  if not own then return 0, lease_ns(k.newest[2]) end
  return lease_ns(tonumber(own)), lease_ns(k.newest[2])
end

-- decide is the conc package's decide: {limited, remaining, retry}.
local function conc_decide(key, k, L, held, now, n, reserve)
  local now_us = now[1] * 1000000 + math.floor(now[2] / 1000)
  local live = 0
  if k.kind == 'zset' then live = redis.call('ZCOUNT', key, '(' .. string.format('%d', now_us), '+inf') end
  local d = {limited = false, retry = -1}
  if held then
    d.remaining = L - live
  elseif live + 1 + reserve <= L then
    d.remaining = L - live - 1
  else
    d.limited, d.remaining = true, L - live
    local kth = live + 1 + reserve - L
    if kth <= live then
      local r = redis.call('ZRANGE', key, '(' .. string.format('%d', now_us), '+inf', 'BYSCORE', 'LIMIT', string.format('%d', kth - 1), '1', 'WITHSCORES')
      local t = r[2] and score_ns(tonumber(r[2])) or nil
      if t ~= nil and lt(n, t) then d.retry = sub(t, n) end
    end
  end
  d.remaining = math.min(math.max(d.remaining, 0), L)
  return d
end

-- sweep removes up to 64 lapsed holders (scored at or before now), never
-- the caller, then the caller when remove is set: how many it removed.
local function sweep(key, id, now_us, remove)
  local gone = {}
  local lapsed = redis.call('ZRANGE', key, '-inf', string.format('%d', now_us), 'BYSCORE', 'LIMIT', '0', string.format('%d', CONC_SWEEP + 1))
  for _, m in ipairs(lapsed) do
    if #gone == CONC_SWEEP then break end
    if m ~= id then gone[#gone + 1] = m end
  end
  if remove then gone[#gone + 1] = id end
  if #gone == 0 then return 0 end
  return redis.call('ZREM', key, unpack(gone))
end

local function conc_command(op, name, peek)
  if #KEYS ~= 1 then return fail('ERR this script takes one key: call it with numkeys 1') end
  local key = KEYS[1]
  local c, err = parse_conc(op, name)
  if err then return err end
  local now = clock()
  local k
  k, err = read_conc(key)
  if err then return err end
  local n = add(mul(now[1], SECOND), now[2])
  local now_us = now[1] * 1000000 + math.floor(now[2] / 1000)
  if op == 'release' then
    local own, latest = holder(key, k, c.id)
    local held, remove = lt(n, own), own ~= 0
    if remove then
      if not lt(n, latest) then
        redis.call('DEL', key)
      else
        local removed = sweep(key, c.id, now_us, true)
        local e = lease_expiry(latest)
        if removed < k.size and cmp(e, k.expire) ~= 0 then redis.call('PEXPIREAT', key, fmt(e)) end
      end
    end
    return held and 1 or 0
  end
  local L = c.limit
  if op == 'peek' then
    local latest = k.kind == 'zset' and lease_ns(k.newest[2]) or 0
    local d = conc_decide(key, k, L, false, now, n, c.reserve)
    local reset = 0
    if lt(n, latest) then reset = sub(latest, n) end
    return five(d.limited, L, d.remaining, d.retry, reset, c.ms)
  end
  -- A lease ends before 2^53 µs, the largest score a double holds exactly.
  local max_lease = quo(sub(mul(MAX_LIMIT, 1000), n), SECOND) -- (2^53 - 1) µs
  if lt(max_lease, c.lease) then
    return fail('ERR lease must end before the year 2255 (2^53 microseconds, the largest sorted-set score held exactly): at most ' .. fmt(max_lease) .. ' seconds from now')
  end
  local own, latest = holder(key, k, c.id)
  local stop = add(n, mul(c.lease, SECOND))
  local d = conc_decide(key, k, L, lt(n, own), now, n, c.reserve)
  if d.limited then
    local until_all = imax(own, latest)
    local reset = 0
    if lt(n, until_all) then reset = sub(until_all, n) end
    return five(true, L, d.remaining, d.retry, reset, c.ms)
  end
  local expire = imax(latest, stop)
  local reply = five(false, L, d.remaining, d.retry, sub(expire, n), c.ms)
  local removed = 0
  if k.kind == 'zset' then removed = sweep(key, c.id, now_us, false) end
  local q, r = quorem(stop, 1000)
  if lt(0, r) then q = add(q, 1) end
  redis.call('ZADD', key, fmt(q), c.id)
  local e = lease_expiry(expire)
  if k.kind ~= 'zset' or removed == k.size or cmp(e, k.expire) ~= 0 then redis.call('PEXPIREAT', key, fmt(e)) end
  return reply
end

return conc_command("acquire", "conc.acquire", false)
