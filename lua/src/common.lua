-- What every command shares with the module: argument syntax and its
-- errors, the clock, instants, replies, and reading a key.

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local SECOND = 1000000000

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
-- a word of an option where a number may stand: never a cost or a limiter
local function optword(s) local u = string.upper(s); return u == 'MS' or u == 'RESERVE' or u == 'UPTO' or u == 'DEBT' or u == 'SPREAD' or u == 'SPAN' or u == 'LIMITS' end
local DEBT = -1 -- the reserve a limit runs with when it is a charge (DEBT), which takes no RESERVE

-- A syntax is {positional args, optional arg, default, reserve allowed};
-- an arg is {name, min, max, seconds} with min and max exact integers.
local function range_error(a, prefix)
  if a.seconds then
    return fail(text(T_SECONDS, prefix, a.name, fmt(a.min), fmt(a.max)))
  end
  return fail(text(T_RANGE, prefix, a.name, fmt(a.min), fmt(a.max)))
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
    return nil, fail(text(T_RESERVE_RANGE, prefix, fmt(limit)))
  end
  return n
end
-- parse_upto reads UPTO's n, 1 to MAX_UPTO, for a call of cost (a refund takes none).
local function parse_upto(s, cost, prefix)
  local n = parse(s)
  if n == nil or lt(n, 1) or lt(MAX_UPTO, n) then return nil, fail(text(T_UPTO_RANGE, MAX_UPTO)) end
  if lt(cost, 0) then return nil, fail(text(T_UPTO_REFUND, prefix, fmt(cost))) end
  return n
end
-- parse_options reads MS, RESERVE n (when allowed), EACH (when each), UPTO n and
-- DEBT (when upto and not no_debt), SPREAD (when spread), SPAN start end next (when
-- span) and LIMITS key field (when limits) from args[i..]: ms, RESERVE's n's index
-- (0: none), EACH, UPTO's n's index, an error, DEBT, SPREAD, SPAN's start's index and
-- LIMITS's key's; DEBT with RESERVE or UPTO is an error.
local function parse_options(args, i, allowed, names, each, upto, no_debt, spread, span, limits)
  local seen, at, span_at, limits_at = {}, {RESERVE = 0, UPTO = 0}, 0, 0
  while i <= #args do
    local w = string.upper(args[i])
    if not (w == 'MS' or (each and w == 'EACH') or (allowed and w == 'RESERVE') or (upto and (w == 'UPTO' or w == 'DEBT' and not no_debt))
        or (spread and w == 'SPREAD') or (span and w == 'SPAN') or (limits and w == 'LIMITS')) then
      return nil, nil, nil, nil, fail(text(T_UNKNOWN_OPTION, quote(args[i]), names))
    end
    if seen[w] then return nil, nil, nil, nil, fail(text(T_TWICE, w)) end
    seen[w] = true
    if w == 'LIMITS' then
      if i + 2 > #args then return nil, nil, nil, nil, fail(text(T_LIMITS, '')) end
      limits_at, i = i + 1, i + 2
    end
    if w == 'SPAN' then
      if i + 3 > #args then return nil, nil, nil, nil, fail(text(T_SPAN, '', fmt(MAX_SPAN_MS))) end
      span_at, i = i + 1, i + 3
    end
    if at[w] then
      if i + 1 > #args then return nil, nil, nil, nil, fail(w == 'RESERVE' and text(T_RESERVE_WORD) or text(T_UPTO_WORD, MAX_UPTO)) end
      i = i + 1
      at[w] = i
    end
    i = i + 1
  end
  local with = (at.RESERVE > 0 and 'RESERVE') or (at.UPTO > 0 and 'UPTO')
  if seen.DEBT and with then return nil, nil, nil, nil, fail(text(T_DEBT_WITH, with)) end
  return seen.MS or false, at.RESERVE, seen.EACH or false, at.UPTO, nil, seen.DEBT, seen.SPREAD, span_at, limits_at
end
-- override sets v's positional values (syn's) to those LIMITS's field holds
-- (the hash args[at], the field args[at + 1]: the family's positional arguments
-- as integers separated by spaces), when the hash holds the field; without it
-- v stands. It returns nil, or an error starting with prefix.
local function override(syn, v, args, at, prefix)
  local h = redis.pcall('HGET', args[at], args[at + 1])
  if type(h) == 'table' and string.sub(h.err, 1, 9) ~= 'WRONGTYPE' then return h end -- the server's own (a Cluster's slot)
  if type(h) == 'table' then return fail(text(T_LIMITS_TYPE, prefix, quote(args[at]))) end
  if not h then return nil end
  local words = {}
  for w in string.gmatch(h, '[^ ]+') do words[#words + 1] = w end
  if #words ~= #syn.positional then
    local names = {}
    for j, a in ipairs(syn.positional) do names[j] = a.name end
    return fail(text(T_LIMITS_WORDS, prefix, quote(args[at]), quote(args[at + 1]), #names, table.concat(names, ' '), quote(h)))
  end
  for j, a in ipairs(syn.positional) do
    local x = parse_arg(a, words[j])
    if x == nil then return range_error(a, prefix .. text(T_LIMITS_PREFIX, quote(args[at]), quote(args[at + 1]))) end
    v[j] = x
  end
end
-- spread_offset is window.SpreadOffset: where key's windows of window
-- seconds start, in ms after the epoch's alignment: the first 13 hex digits
-- of the key's SHA-1 (52 bits, exact in a double) modulo the window in ms
-- (math.fmod: exact). nil past MAX_SPREAD_WINDOW.
local function spread_offset(key, window)
  if window > MAX_SPREAD_WINDOW then return nil end
  local h = redis.sha1hex(key)
  local x = tonumber(string.sub(h, 1, 7), 16) * 16777216 + tonumber(string.sub(h, 8, 13), 16)
  return math.fmod(x, window * 1000)
end
-- bounds_of is where a window limit of window seconds on key lies: SPREAD's
-- {offset = ms}, SPAN's {span = {start, end, next}} (Unix ms, from args[span_at]),
-- nil for neither, or an error starting with prefix.
local function bounds_of(args, spread, span_at, key, window, prefix)
  if spread and span_at > 0 then return nil, fail(text(T_SPAN_SPREAD, prefix)) end
  if spread then
    local off = spread_offset(key, window)
    if not off then return nil, fail(text(T_SPREAD_WINDOW, prefix, MAX_SPREAD_WINDOW, fmt(window))) end
    return {offset = off}
  end
  if span_at == 0 then return nil end
  local a, b, c = parse(args[span_at]), parse(args[span_at + 1]), parse(args[span_at + 2])
  local w = window * 1000 -- exact: window <= MAX_SECONDS
  if not (a and b and c) or lt(a, 0) or not lt(a, b) or not lt(b, c) or lt(MAX_SPAN_MS, c) or b - a > w or c - b > w then
    return nil, fail(text(T_SPAN, prefix, fmt(MAX_SPAN_MS)))
  end
  return {span = {a, b, c}}
end
-- zero is v with its cost 0; grant is UPTO's rule (ratelimit.Grant): the most
-- calls in 0..n of cost each that remaining holds, keeping reserve.
local function zero(v) local z = {unpack(v)}; z[#z] = 0; return z end
local function grant(remaining, cost, reserve, n)
  if not lt(0, cost) then return n end
  if lt(remaining - reserve, cost) then return 0 end
  return math.min(n, math.floor((remaining - reserve) / cost))
end
-- parse_one reads a command of one key: args are its arguments after the key;
-- UPTO n is taken when upto (a consuming command). It returns the values
-- (positional, then the cost), ms, the reserve and UPTO's n (0 if none), or
-- an error reply; then where the windows lie (bounds_of).
local function parse_one(syn, args, name, upto, key)
  local np = #syn.positional
  if #args < np or #args + 2 > MAX_ONE_KEY_ARGS then return nil, nil, nil, nil, arity(name) end
  local v = {}
  for j, a in ipairs(syn.positional) do
    v[j] = parse_arg(a, args[j])
    if v[j] == nil then return nil, nil, nil, nil, range_error(a, '') end
  end
  local i = np + 1
  v[np + 1] = syn.def
  if i <= #args and not optword(args[i]) then
    v[np + 1] = parse_arg(syn.optional, args[i])
    if v[np + 1] == nil then return nil, nil, nil, nil, range_error(syn.optional, '') end
    i = i + 1
  end
  upto = upto and syn.upto
  local ms, reserve_at, _, upto_at, err, debt, spread, span_at, limits_at = parse_options(args, i, syn.reserve, upto and syn.upto_options or syn.options, false, upto, false, syn.spread, syn.span, true)
  local n, reserve, bounds = 0, debt and DEBT or 0, nil
  if not err and limits_at > 0 then err = override(syn, v, args, limits_at, '') end
  if not err then bounds, err = bounds_of(args, spread, span_at, key, v[2], '') end
  if not err and upto_at > 0 then n, err = parse_upto(args[upto_at], v[np + 1], '') end
  if not err and reserve_at > 0 then reserve, err = parse_reserve(args[reserve_at], syn.limit(v), '') end
  if err then return nil, nil, nil, nil, err end
  return v, ms, reserve, n, nil, bounds
end
-- The clock: the server's TIME, as an instant {s, ns}.
local function clock()
  local t = redis.call('TIME')
  return {tonumber(t[1]), tonumber(t[2]) * 1000}
end
-- fast_first runs a command of one key's fast path, fast(kind, key, v, now,
-- ms, peek), when fast_args reads its arguments: its reply, or nil and the
-- instant it read (nil if none), at which the exact path then decides.
local function fast_first(fast, kind, key, args, peek)
  local v, ms = fast_args(kind, args)
  if not v then return nil, nil end
  local now = clock()
  return fast(kind, key, v, now, ms, peek), now
end
-- Instants are {seconds, nanoseconds} since the Unix epoch: a nanosecond
-- time does not fit a double, its two parts do.
local function since(a, b) -- a - b, an exact integer of nanoseconds
  return add(mul(a[1] - b[1], SECOND), a[2] - b[2])
end

local LATEST = {MAX_SECONDS, 854775807} -- the largest instant: 2^63 - 1 ns
local function later(a, d) -- a + d for 0 <= d; nil past LATEST
  local q, r = quorem(d, SECOND)
  local s, ns = a[1] + float(q), a[2] + r
  if ns >= SECOND then s, ns = s + 1, ns - SECOND end
  if s > MAX_SECONDS or (s == MAX_SECONDS and ns > LATEST[2]) then return nil end
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
-- fast_time is reply_time for a number of nanoseconds below 2^53.
local function fast_time(d, ms)
  if d < 0 then return -1 end
  local unit, over = SECOND, 1000000 -- whole seconds, plus one from a millisecond over
  if ms then unit, over = 1000000, 1 end
  local r = math.fmod(d, unit)
  local q = (d - r) / unit
  if r >= over then q = q + 1 end
  return q
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
  return fail(text(T_OTHER_DATA, state, why))
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
-- or an error reply; then whether it is owed ("<instant>:debt", where
-- debt: a family that takes DEBT).
local function load_instant(key, now, state, tolerance, debt)
  local kind, expire, s = read_string(key)
  local err = check_key(kind, expire, 'string', state)
  if err then return nil, err end
  if kind == 'none' then return nil end
  local owed = debt and string.sub(s, -5) == ':debt'
  local at = split_instant(owed and string.sub(s, 1, -6) or s)
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
  return at, nil, owed
end
-- store_instant writes an instant state when write is set: SET with an
-- expiry at the instant (marked when owed), or DEL when it has come (the
-- limiter has no work left).
local function store_instant(key, existed, now, at, write, owed)
  if not write then return end
  if after(at, now) then
    redis.call('SET', key, instant_string(at) .. (owed and ':debt' or ''), 'PXAT', string.format('%d', ceil_ms(at)))
  elseif existed then
    redis.call('DEL', key)
  end
end
-- ahead is how far state runs ahead of now, at most limit unless owed, and
-- whether it had to be cut to limit (a clock that stepped back).
local function ahead_of(state, now, limit, owed)
  if state == nil or not after(state, now) then return 0, false end
  local d = since(state, now)
  if lt(limit, d) and not owed then return limit, true end
  return d, false
end

local function sat_add(a, b)
  local c = add(a, b)
  if lt(MAXI, c) then return MAXI end
  return c
end
-- reserved is hit(cost, debt, ...) as a family's HitReserve and Charge:
-- first at cost + reserve when there is a reserve and cost >= 0, then,
-- unless refused, at cost (a charge when the reserve is DEBT).
local function reserved(hit, cost, reserve, ...)
  local d, n, at, err
  if lt(0, reserve) and le(0, cost) then d, n, at, err = hit(sat_add(cost, reserve), false, ...) end
  if not err and (not d or not d.limited) then d, n, at, err = hit(cost, reserve == DEBT, ...) end
  return d, n, at, err
end
-- parse_count reads a decimal count as the module reads an instant:
-- digits only, within 64 bits.
local function parse_count(s)
  if not string.match(s, '^%d') then return nil end
  return parse(s)
end
