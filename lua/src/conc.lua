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
-- {limit, lease, id, reserve, ms} or an error.
local function parse_conc(op, name, args)
  local first = ({acquire = 4, peek = 2, release = 2})[op] -- the first option in args
  local nargs = 2 + #args
  if nargs < first + 1 or nargs > MAX_ONE_KEY_ARGS or (op == 'release' and nargs ~= 3) then return nil, arity(name) end
  local c = {reserve = 0, ms = false}
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
    return nil, fail('ERR id must be 1 to ' .. MAX_ID .. ' bytes (a request id), not ' .. #c.id)
  end
  local ms, reserve_at, _, err = parse_options(args, first, syn.reserve, syn.options, false)
  if err then return nil, err end
  c.ms = ms
  if reserve_at > 0 then
    c.reserve, err = parse_reserve(args[reserve_at], c.limit, '')
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
  if #first[1] < 1 or #first[1] > MAX_ID or not state_score(fs) or #last[1] < 1 or #last[1] > MAX_ID or not state_score(ls) then
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

local function conc_command(op, name, peek, keys, args)
  if #keys ~= 1 then return fail('ERR this script takes one key: call it with numkeys 1') end
  local key = keys[1]
  local c, err = parse_conc(op, name, args)
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
