-- The concurrency limiter: a sorted set, member the holder's id, score the
-- end of its lease in Unix µs, in a key that expires at the whole second
-- after its latest lease (see the conc package and the module's conc.go,
-- which this follows step for step).

-- lease_expiry is the key's expiry (Unix ms) for a latest lease ending at
-- ns: the whole second at or after it.
local function lease_expiry(ns)
  local q, r = quorem(ns, SECOND)
  if lt(0, r) then q = add(q, 1) end
  return mul(q, 1000)
end
-- parse_conc reads CONC.ACQUIRE (op 'acquire'), CONC.PEEK or CONC.RELEASE:
-- {limit, lease, id, reserve, ms, n (UPTO's, RELEASE's; 0: none)} or an error.
local function parse_conc(op, name, args)
  local first = ({acquire = 4, peek = 2, release = 2})[op] -- the first option in args
  local nargs = 2 + #args
  if nargs < first + 1 or nargs > MAX_ONE_KEY_ARGS or (op == 'release' and nargs > 4) then return nil, arity(name) end
  local c = {reserve = 0, ms = false, n = 0}
  local syn = syntax('conc')
  local limit_arg = syn.positional[1]
  if op ~= 'release' then
    c.limit = parse_arg(limit_arg, args[1])
    if c.limit == nil then return nil, range_error(limit_arg, '') end
  end
  if op == 'acquire' then
    local lease_arg = syn.positional[2]
    c.lease = parse_arg(lease_arg, args[2])
    if c.lease == nil then return nil, range_error(lease_arg, '') end
    c.id = args[3]
  elseif op == 'release' then
    c.id = args[1]
  end
  if c.id and (#c.id < 1 or #c.id > MAX_ID) then
    return nil, fail(text(T_ID, MAX_ID, #c.id))
  end
  if op == 'release' then
    local n_arg = {name = 'n', min = 1, max = MAX_UPTO}
    if args[2] then c.n = parse_arg(n_arg, args[2]) end
    if c.n == nil then return nil, range_error(n_arg, '') end
    return c
  end
  local names = op == 'acquire' and syn.upto_options or syn.options
  local ms, reserve_at, _, upto_at, err = parse_options(args, first, syn.reserve, names, false, op == 'acquire', true)
  c.ms = ms
  if not err and reserve_at > 0 then c.reserve, err = parse_reserve(args[reserve_at], c.limit, '') end
  if not err and upto_at > 0 then c.n, err = parse_upto(args[upto_at], 1, '') end
  if err then return nil, err end
  return c
end
-- slot_member is the member of id's k-th slot (the engine's SlotMember).
local function slot_member(id, k)
  if k <= 1 then return id end
  return id .. string.rep('\0', MAX_ID - #id) .. string.char(#id) .. string.format('%d', k)
end
-- conc_entry is a member and score a write leaves: an id or a slot's member.
local function conc_entry(m, s)
  return (#m >= 1 and #m <= MAX_ID or #m > MAX_ID + 1 and #m <= MAX_ID + 8) and state_score(s)
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
  if not conc_entry(first[1], fs) or not conc_entry(last[1], ls) then
    return nil, other_data(CONC_STATE, 'its members are not holder ids of 1 to 128 bytes scored with a lease\'s end')
  end
  if cmp(lease_expiry(mul(ls, 1000)), expire) ~= 0 then
    return nil, other_data(CONC_STATE, 'the key does not expire with its latest lease')
  end
  k.newest = {last[1], ls}
  return k
end
-- holder is the caller's lease's end, the latest end of a lease not among
-- its slots (ns, 0 for none), and the slots it holds (engine.SlotsHeld).
local function holder(key, k, id)
  if k.kind ~= 'zset' then return 0, 0, 0 end
  if k.newest[1] == id then -- its slot 2 would sort after it: it holds one
    local prev = redis.call('ZRANGE', key, '-2', '-2', 'WITHSCORES')
    return lease_ns(k.newest[2]), lease_ns(tonumber(prev[2])), 1
  end
  local s = redis.call('ZSCORE', key, id)
  if not s then return 0, lease_ns(k.newest[2]), 0 end
  local own, lo, hi = tonumber(s), 1, 2 -- slot lo is held, hi may not be
  local function has(j) return tonumber(redis.call('ZSCORE', key, slot_member(id, j))) == own end
  while hi <= k.size and has(hi) do lo, hi = hi, 2 * hi end
  while hi - lo > 1 do
    local mid = lo + math.floor((hi - lo) / 2)
    if has(mid) then lo = mid else hi = mid end
  end
  local latest = k.newest[2]
  if lo > 1 and latest == own and redis.call('ZCOUNT', key, s, s) <= lo then -- every lease ending there is its own
    latest = tonumber(redis.call('ZRANGE', key, '(' .. s, '-inf', 'BYSCORE', 'REV', 'LIMIT', '0', '1', 'WITHSCORES')[2])
  end
  return lease_ns(own), lease_ns(latest), lo
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
-- sweep removes up to 64 lapsed holders (scored at or before now_us; none
-- when it is false), never the member id, then sets id's slots from..to at
-- score, or removes them when score is nil, in the module's batches: its
-- first ZREM holds the sweep and up to 128 members in all, its ZADDs 64
-- members each. It returns how many lapsed holders it removed on an add.
local function sweep(key, id, now_us, from, to, score)
  local a, removed = {}, 0
  local lapsed = now_us and redis.call('ZRANGE', key, '-inf', string.format('%d', now_us), 'BYSCORE', 'LIMIT', '0', string.format('%d', CONC_SWEEP + 1)) or {}
  for _, m in ipairs(lapsed) do
    if #a == CONC_SWEEP then break end
    if m ~= id then a[#a + 1] = m end
  end
  if score then
    if #a > 0 then removed = redis.call('ZREM', key, unpack(a)) end
    a = {}
  end
  for j = from, to do
    if score then a[#a + 1] = score end
    a[#a + 1] = slot_member(id, j)
    if #a == 128 or j == to then redis.call(score and 'ZADD' or 'ZREM', key, unpack(a)); a = {} end
  end
  return removed
end
-- fast_conc_args reads CONC.ACQUIRE's and CONC.RELEASE's arguments as
-- parse_conc would, for the common call only (plain digits, an id of 1 to
-- MAX_ID bytes, an optional MS on an acquire): nil for any other call,
-- which parse_conc reads.
local function fast_conc_args(op, args)
  local n = #args
  if op == 'release' then
    if n ~= 1 or #args[1] < 1 or #args[1] > MAX_ID then return nil end
    return {id = args[1], reserve = 0, ms = false}
  end
  if n < 3 or n > 4 then return nil end
  local limit, lease, id = fast_number(args[1]), fast_number(args[2]), args[3]
  if not limit or limit < 1 or limit > MAX_CONC_LIMIT or not lease or lease < 1 or lease > MAX_SECONDS or
    #id < 1 or #id > MAX_ID then
    return nil
  end
  local ms = false
  if n == 4 then
    if #args[4] ~= 2 or string.upper(args[4]) ~= 'MS' then return nil end
    ms = true
  end
  return {limit = limit, lease = lease, id = id, reserve = 0, ms = ms}
end
-- fast_conc is CONC.ACQUIRE and CONC.RELEASE on plain numbers, for the
-- common key (empty, or a state whose oldest and newest holders are ids
-- scored with whole µs, expiring with its latest lease, every score read
-- within 104 days of now) and a lease below 9000000 s: times are ns from
-- now, below 2^53, so every step is exact in a double and equal to the
-- exact path's. It gives the reply (or WRONGTYPE), or nil for any other
-- call or key, which the exact path decides; it writes only when it
-- decides.
local function fast_conc(op, key, c, now)
  if now[1] >= MAX_SECONDS - 2 * 9000000 or (op == 'acquire' and c.lease >= 9000000) then return nil end
  local size = redis.pcall('ZCARD', key)
  if type(size) == 'table' then return fail(WRONGTYPE) end
  local now_us = now[1] * 1000000 + math.floor(now[2] / 1000)
  local sub_us = math.fmod(now[2], 1000) -- now in ns is now_us * 1000 + sub_us
  -- rel is a score (µs) in ns from now, nil when the exact path must decide.
  local function rel(score)
    if score ~= math.floor(score) or math.abs(score - now_us) >= 9000000000000 then return nil end
    return (score - now_us) * 1000 - sub_us
  end
  local expire, newest_id, newest, lapsed = -1, nil, nil, false
  if size > 0 then
    expire = redis.call('PEXPIRETIME', key)
    if expire < 0 then return nil end
    local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
    local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    local fs, ls = tonumber(first[2]), tonumber(last[2])
    if #first[1] < 1 or #first[1] > MAX_ID or not state_score(fs) or #last[1] < 1 or #last[1] > MAX_ID or not state_score(ls) then
      return nil
    end
    local r = math.fmod(ls, 1000000) -- the key expires at the second after the latest lease
    local e = (ls - r) / 1000000
    if r > 0 then e = e + 1 end
    if e * 1000 ~= expire then return nil end
    newest_id, newest = last[1], rel(ls)
    if newest == nil then return nil end
    lapsed = fs <= now_us -- else no lease has lapsed: ZCOUNT is the size, and a sweep finds nothing
  end
  -- The caller's lease's end and the latest other one's (ns from now; nil: none).
  local own, latest = nil, nil
  if size > 0 then
    if newest_id == c.id then
      own = newest
      local prev = redis.call('ZRANGE', key, '-2', '-2', 'WITHSCORES')
      if prev[2] then
        latest = rel(tonumber(prev[2]))
        if latest == nil then return nil end
      end
    else
      latest = newest
      local s = redis.call('ZSCORE', key, c.id)
      if s then -- one holding more slots goes to the exact path
        own = rel(tonumber(s))
        if own == nil or redis.call('ZSCORE', key, slot_member(c.id, 2)) == s then return nil end
      end
    end
  end
  -- key_expiry is the key's expiry (ms) for a latest lease ending at d ns
  -- from now (d >= 0): the whole second at or after it.
  local function key_expiry(d)
    local x = now[2] + d
    local r = math.fmod(x, SECOND)
    local sec = now[1] + (x - r) / SECOND
    if r > 0 then sec = sec + 1 end
    return sec * 1000
  end
  if op == 'release' then
    if own == nil then return 0 end
    if latest == nil or latest <= 0 then
      redis.call('DEL', key)
    else -- the latest lease is live: the key stays
      sweep(key, c.id, lapsed and now_us, 1, 1)
      local e = key_expiry(latest)
      if e ~= expire then redis.call('PEXPIREAT', key, string.format('%d', e)) end
    end
    if own > 0 then return 1 end
    return 0
  end
  -- acquire: the conc package's decision, then the write.
  local L, reserve = c.limit, c.reserve
  local held = own ~= nil and own > 0
  local live = 0
  if lapsed then
    live = redis.call('ZCOUNT', key, '(' .. string.format('%d', now_us), '+inf')
  else
    live = size
  end
  local limited, remaining, retry = false, 0, -1
  if held then
    remaining = L - live
  elseif live + 1 + reserve <= L then
    remaining = L - live - 1
  else
    limited, remaining = true, L - live
    local kth = live + 1 + reserve - L
    if kth <= live then
      local r = redis.call('ZRANGE', key, '(' .. string.format('%d', now_us), '+inf', 'BYSCORE', 'LIMIT', string.format('%d', kth - 1), '1', 'WITHSCORES')
      if r[2] then
        local t = rel(tonumber(r[2]))
        if t == nil then return nil end
        if t > 0 then retry = t end
      end
    end
  end
  remaining = math.min(math.max(remaining, 0), L)
  if limited then
    local until_all, reset = own, 0
    if latest and (until_all == nil or latest > until_all) then until_all = latest end
    if until_all and until_all > 0 then reset = until_all end
    return {1, L, remaining, fast_time(retry, c.ms), fast_time(reset, c.ms)}
  end
  local stop = c.lease * SECOND
  local ends = stop
  if latest and latest > ends then ends = latest end
  local reply = {0, L, remaining, fast_time(retry, c.ms), fast_time(ends, c.ms)}
  local score = now_us + c.lease * 1000000 -- the lease's end in µs, rounded up
  if sub_us > 0 then score = score + 1 end
  local removed = sweep(key, c.id, lapsed and now_us, 1, 1, string.format('%d', score))
  local e = key_expiry(ends)
  if size == 0 or removed == size or e ~= expire then redis.call('PEXPIREAT', key, string.format('%d', e)) end
  return reply
end

local function conc_command(op, name, peek, keys, args)
  if #keys ~= 1 then return fail('ERR this script takes one key: call it with numkeys 1') end
  local key = keys[1]
  local now
  if op ~= 'peek' then
    local fc = fast_conc_args(op, args)
    if fc then
      now = clock()
      local reply = fast_conc(op, key, fc, now)
      if reply then return reply end
    end
  end
  local c, err = parse_conc(op, name, args)
  if err then return err end
  now = now or clock()
  local k
  k, err = read_conc(key)
  if err then return err end
  local n = add(mul(now[1], SECOND), now[2])
  local now_us = now[1] * 1000000 + math.floor(now[2] / 1000)
  if op == 'release' then -- the conc package's FreeN
    local own, latest, h = holder(key, k, c.id)
    local held, slots = lt(n, own), math.max(h, 1)
    local released = held and math.min(c.n > 0 and c.n or slots, slots) or 0
    local keep = held and slots - released or 0
    if keep > 0 then latest = imax(latest, own) end
    if own ~= 0 and not lt(n, latest) then
      redis.call('DEL', key)
    elseif own ~= 0 then -- the latest lease is live: the key stays
      sweep(key, c.id, now_us, keep + 1, slots)
      local e = lease_expiry(latest)
      if cmp(e, k.expire) ~= 0 then redis.call('PEXPIREAT', key, fmt(e)) end
    end
    return released
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
    return fail(text(T_LEASE, fmt(max_lease)))
  end
  local own, latest, h = holder(key, k, c.id)
  local stop, held = add(n, mul(c.lease, SECOND)), lt(n, own)
  local d = conc_decide(key, k, L, held, now, n, c.reserve)
  local reply, granted = nil, 0
  if d.limited then
    local until_all = imax(own, latest)
    local reset = 0
    if lt(n, until_all) then reset = sub(until_all, n) end
    reply = five(true, L, d.remaining, d.retry, reset, c.ms)
  else -- the conc package's AcquireN: up to n slots, as room allows
    local new = held and 0 or 1 -- the slot decide counted for a new holder
    granted = held and h or 0
    local added = math.max(math.min(math.max(c.n, 1) - granted, d.remaining - c.reserve + new), 0)
    local expire = imax(latest, stop)
    reply = five(false, L, math.max(d.remaining + new - added, 0), d.retry, sub(expire, n), c.ms)
    granted = granted + added
    local q, r = quorem(stop, 1000)
    if lt(0, r) then q = add(q, 1) end
    local removed = sweep(key, c.id, k.kind == 'zset' and now_us, 1, granted, fmt(q))
    local e = lease_expiry(expire)
    if removed == k.size or cmp(e, k.expire) ~= 0 then redis.call('PEXPIREAT', key, fmt(e)) end
  end
  if c.n > 0 then reply[6] = granted end
  return reply
end
