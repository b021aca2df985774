-- RL.ALL and RL.PEEK: several limits in one decision (see the module's
-- all.go, which this follows step for step). Every limit must admit or
-- nothing is taken; the reply is the deciding limit's five integers and
-- its position, and with EACH every limit's own five after them.

local function family_named(s)
  local u = string.upper(s)
  for _, f in ipairs(FAMILIES) do
    if u == f then return string.lower(f) end
  end
end

local function arg_names(syn)
  local names = {}
  for _, a in ipairs(syn.positional) do names[#names + 1] = a.name end
  names[#names + 1] = syn.optional.name
  return table.concat(names, ' ')
end
-- parse_limiter reads limiter j, written out at args[i] (its family, its
-- arguments, its cost, then SPREAD or SPAN for a window on key): the limit, the
-- index after it, or an error; its numbers' errors name it when prefixed
-- (RL.ALL's).
local function parse_limiter(args, i, j, prefixed, key)
  local f = family_named(args[i])
  if f == nil then return nil, nil, fail(text(T_UNKNOWN_LIMITER, quote(args[i]), j, LIMITERS)) end
  if f == 'lb' then return nil, nil, fail(text(T_SHAPER_NOT_IN_ALL, j)) end
  local syn = syntax(f)
  local words = #syn.positional + 1
  if i + words > #args then return nil, nil, fail(text(T_LIMITER_WORDS, j, string.upper(f), words, arg_names(syn))) end
  local prefix, v = prefixed and text(T_LIMITER_PREFIX, j, string.upper(f)) or '', {}
  for k, a in ipairs(syn.positional) do
    v[k] = parse_arg(a, args[i + k])
    if v[k] == nil then return nil, nil, range_error(a, prefix) end
  end
  v[words] = parse_arg(syn.optional, args[i + words])
  if v[words] == nil then return nil, nil, range_error(syn.optional, prefix) end
  local l, nxt, spread, span_at, limits_at = {family = f, v = v, reserve = 0, syn = syn, prefix = prefix}, i + 1 + words, false, 0, 0
  while args[nxt] do -- LIMITS key field, SPREAD and SPAN start end next, each once
    local u, err = string.upper(args[nxt]), nil
    if u == 'LIMITS' then
      if limits_at > 0 then err = text(T_TWICE, u)
      elseif nxt + 2 > #args then err = text(T_LIMITS, prefix)
      else limits_at, nxt = nxt + 1, nxt + 2 end
    elseif u == 'SPREAD' and not syn.spread then err = text(T_SPREAD_FAMILY, j, string.upper(f))
    elseif u == 'SPAN' and not syn.span then err = text(T_SPAN_FAMILY, j, string.upper(f))
    elseif (u == 'SPREAD' and spread) or (u == 'SPAN' and span_at > 0) then err = text(T_TWICE, u)
    elseif u == 'SPREAD' then spread = true
    elseif u == 'SPAN' then
      if nxt + 3 > #args then err = text(T_SPAN, prefix, fmt(MAX_SPAN_MS)) end
      span_at, nxt = nxt + 1, nxt + 3
    else break end
    if err then return nil, nil, fail(err) end
    nxt = nxt + 1
  end
  local err
  if limits_at > 0 then err = override(syn, v, args, limits_at, prefix) end
  if err then return nil, nil, err end
  l.bounds, err = bounds_of(args, spread, span_at, key, v[2], prefix)
  if err then return nil, nil, err end
  return l, nxt
end
-- parse_all reads the limiters after the keys, and the options: the
-- limits ({family, v}), ms, each, or an error, in the module's order.
local function parse_all(name, keys, args, peek)
  local n = #keys
  if 2 + n + #args > MAX_ARGS then return nil, nil, nil, arity(name) end
  if n < 1 or n > MAX_KEYS then return nil, nil, nil, fail(text(T_NUMKEYS, MAX_KEYS)) end
  for a = 1, n do
    for b = a + 1, n do
      if keys[a] == keys[b] then return nil, nil, nil, fail(text(T_KEY_TWICE, quote(keys[a]))) end
    end
  end
  local lims, i, err = {}, 1, nil
  for j = 1, n do
    local w = args[i]
    if w == nil or optword(w) then return nil, nil, nil, fail(text(T_FEW_LIMITERS, n, j - 1)) end
    lims[j], i, err = parse_limiter(args, i, j, true, keys[j])
    if err then return nil, nil, nil, err end
  end
  if i <= #args and family_named(args[i]) then
    return nil, nil, nil, fail(text(T_MANY_LIMITERS, n))
  end
  local ms, reserve_at, each, upto_at, err, debt = parse_options(args, i, true, peek and PEEK_OPTIONS or ALL_OPTIONS, true, not peek)
  if err then return nil, nil, nil, err end
  for _, l in ipairs(debt and lims or {}) do l.reserve = DEBT end
  local upto = 0
  for _, l in ipairs(upto_at > 0 and lims or {}) do
    if lt(l.v[#l.v], 0) then return nil, nil, nil, select(2, parse_upto(args[upto_at], l.v[#l.v], l.prefix)) end
  end
  if upto_at > 0 then upto, err = parse_upto(args[upto_at], 0, '') end
  for _, l in ipairs(not err and reserve_at > 0 and lims or {}) do
    l.reserve, err = parse_reserve(args[reserve_at], l.syn.limit(l.v), l.prefix)
    if err then break end
  end
  if err then return nil, nil, nil, err end
  -- One call adds at most MAX_LOG_ADD sliding-log entries (the module's maxLogAdd).
  local entries = 0
  for _, l in ipairs(lims) do
    if l.family == 'sl' and lt(0, l.v[3]) and (debt or not lt(l.v[1], l.v[3])) then entries = sat_add(entries, l.v[3]) end
  end
  if lt(MAX_LOG_ADD, entries) then return nil, nil, nil, fail(text(T_LOG_ADD, MAX_LOG_ADD, fmt(entries))) end
  return lims, ms, each, nil, upto, debt
end
-- run_limit runs one limit on its key: five integers and a write, or an
-- error naming the limiter and its key.
local function run_limit(j, l, key, v, reserve, now, ms)
  local reply, w, err = LIMIT[l.family].limit(l.family, key, v, reserve, now, ms, l.bounds)
  if err then
    local where = text(T_LIMITER_WHERE, j, string.upper(l.family), quote(key))
    if err.err == WRONGTYPE then
      err = fail(text(T_WRONGTYPE_WHERE, where))
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
-- refusing is the refusing limit with the latest retry (the first on a
-- tie), or nil; fewest the limit with the fewest remaining (the first on a
-- tie); all_reply the deciding limit's five and position, and with each
-- every limit's five.
local function refusing(reps)
  local deciding
  for j = 1, #reps do
    if reps[j][1] == 1 and (deciding == nil or later_retry(reps[j][4], reps[deciding][4])) then deciding = j end
  end
  return deciding
end
local function fewest(reps)
  local deciding = 1
  for j = 2, #reps do
    if reps[j][3] < reps[deciding][3] then deciding = j end
  end
  return deciding
end
local function all_reply(reps, deciding, each)
  local reply = {unpack(reps[deciding], 1, 5)}
  reply[6] = deciding - 1
  for j = 1, each and #reps or 0 do
    for k = 1, 5 do reply[#reply + 1] = reps[j][k] end
  end
  return reply
end
-- fast_all is RL.ALL and RL.PEEK when every limiter's words are plain
-- numbers (each read by fast_args) and the options only MS and EACH: each
-- limit's fast path decides without writing, then the writes are made as
-- the exact path makes them (when all admit, every limit's; when one
-- refuses, the refusing limits' own and the others' at cost 0), each fast
-- path run again on the same keys at the same instant, which decides the
-- same. It gives the reply, or nil and the instant read (nil if none) for
-- the exact path, before anything was written.
local function fast_all(peek, keys, args)
  local n = #keys
  if n < 1 or n > MAX_KEYS then return nil end
  for a = 1, n do
    for b = a + 1, n do
      if keys[a] == keys[b] then return nil end
    end
  end
  local lims, i, entries = {}, 1, 0
  for j = 1, n do
    local w = args[i]
    if w == nil or #w > 4 then return nil end
    local kind = string.lower(w)
    local f = LIMIT[kind]
    if not f or not f.all then return nil end
    local words = f.words
    if i + words > #args then return nil end
    local v = fast_args(kind, {unpack(args, i + 1, i + words)})
    if not v then return nil end
    if f.log and v[words] <= v[1] then entries = entries + v[words] end
    lims[j] = {fast = f.fast, kind = kind, v = v}
    i = i + 1 + words
  end
  if entries > MAX_LOG_ADD then return nil end
  local ms, each = false, false
  for k = i, #args do
    local a = string.upper(args[k])
    if a == 'MS' and not ms then ms = true elseif a == 'EACH' and not each then each = true else return nil end
  end
  local now = clock()
  local reps = {}
  for j, l in ipairs(lims) do
    local r = l.fast(l.kind, keys[j], l.v, now, ms, true)
    if r == nil or r.err then return nil, now end
    reps[j] = r
  end
  local deciding = refusing(reps)
  if deciding then
    for j, l in ipairs(lims) do
      if reps[j][1] == 0 then
        l.zero = zero(l.v)
        reps[j] = l.fast(l.kind, keys[j], l.zero, now, ms, true)
        if reps[j] == nil or reps[j].err then return nil, now end
      end
    end
    for j, l in ipairs(lims) do
      if not peek then l.fast(l.kind, keys[j], l.zero or l.v, now, ms, false) end
    end
  else
    if not peek then
      for j, l in ipairs(lims) do reps[j] = l.fast(l.kind, keys[j], l.v, now, ms, false) end
    end
    deciding = fewest(reps)
  end
  return all_reply(reps, deciding, each)
end

local function all_command(_, name, peek, keys, args)
  local fast_reply, now = fast_all(peek, keys, args)
  if fast_reply then return fast_reply end
  local lims, ms, each, err, upto, debt = parse_all(name, keys, args, peek)
  if err then return err end
  now = now or clock()
  local reps, writes = {}, {}
  local granted, logs = upto > 0 and upto, 0
  for j, l in ipairs(upto > 0 and lims or {}) do -- UPTO n: the module's grantAll
    local rep
    rep, _, err = run_limit(j, l, keys[j], zero(l.v), 0, now, ms)
    if err then return err end
    granted = math.min(granted, grant(rep[3], l.v[#l.v], l.reserve, upto))
    if l.family == 'sl' and not lt(l.v[1], l.v[3]) then logs = logs + l.v[3] end
  end
  if logs > 0 then granted = math.min(granted, math.floor(MAX_LOG_ADD / logs)) end
  for _, l in ipairs(granted and granted > 0 and lims or {}) do l.v[#l.v] = granted * l.v[#l.v] end
  for j, l in ipairs(lims) do
    reps[j], writes[j], err = run_limit(j, l, keys[j], l.v, l.reserve, now, ms)
    if err then return err end
  end
  local deciding = refusing(reps)
  if deciding and not debt then
    -- Nothing is taken; a limit that admitted still stores a state a
    -- stepped-back clock left too far ahead: run it at cost 0.
    for j, l in ipairs(lims) do
      if reps[j][1] == 0 then
        reps[j], writes[j], err = run_limit(j, l, keys[j], zero(l.v), 0, now, ms)
        if err then return err end
      end
    end
  end
  local reply = all_reply(reps, deciding or fewest(reps), each)
  if not peek then
    for j, w in ipairs(writes) do LIMIT[lims[j].family].store(w, now) end
  end
  if granted then reply[#reply + 1] = reply[1] == 1 and 0 or granted end -- a refusal grants none
  return reply
end
-- RL.HOLD and RL.SETTLE: one limiter as RL.ALL writes it, its cost the
-- estimate held or the actual cost, and a hold key holding the estimate
-- (see the module's hold.go, which this follows step for step).
local function hold_command(kind, name, _, keys, args)
  if #keys ~= 2 then return fail('ERR this script takes two keys: call it with numkeys 2') end
  local settle = kind == 'settle'
  local i = settle and 1 or 2
  if #args < i or 3 + #args > MAX_ONE_KEY_ARGS then return arity(name) end
  local ttl = settle or parse_arg(HOLD_TTL, args[1])
  if not ttl then return range_error(HOLD_TTL, '') end
  if keys[1] == keys[2] then return fail(text(T_KEY_TWICE, quote(keys[1]))) end
  if optword(args[i]) then return fail(text(T_UNKNOWN_LIMITER, quote(args[i]), 1, LIMITERS)) end
  local l, n, err = parse_limiter(args, i, 1, false, keys[1])
  if err then return err end
  local cost = {name = HOLD_COSTS[3 - i], min = 0, max = MAX_LIMIT} -- the estimate, or the actual cost
  local c = parse_arg(cost, args[i + #l.v]) -- the limiter's cost
  if not c then return range_error(cost, '') end
  local ms, _, _, _, oerr = parse_options(args, n, false, 'MS')
  if oerr then return oerr end
  local held, htype, _, hv = -1, read_string(keys[2])
  if htype == 'other' then return fail(WRONGTYPE) end
  if htype == 'string' then held = parse_arg(cost, hv) end
  if not held then return fail(text(T_HOLD, quote(keys[2]), fmt(MAX_LIMIT))) end
  local v, now, f = l.v, clock(), LIMIT[l.family]
  if settle then
    v[#v] = held >= 0 and c - held or 0
    if v[#v] > MAX_LOG_ADD and l.family == 'sl' then return fail(text(T_LOG_ADD, MAX_LOG_ADD, fmt(v[#v]))) end
  elseif held > MAX_LIMIT - c then
    return fail(text(T_HOLD_FULL, quote(keys[2]), fmt(held), fmt(c), fmt(MAX_LIMIT)))
  end
  local reply, w, lerr = f.limit(l.family, keys[1], v, settle and v[#v] > 0 and DEBT or 0, now, ms, l.bounds)
  if lerr then return lerr end
  f.store(w, now)
  if settle then
    reply[6] = held
    if held >= 0 then redis.call('DEL', keys[2]) end
  elseif reply[1] == 0 then
    redis.call('SET', keys[2], fmt(math.max(held, 0) + c), 'PXAT', fmt(ceil_ms({now[1] + ttl, now[2]})))
  end
  return reply
end
