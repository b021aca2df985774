-- The sliding log: a sorted set, one entry per admitted unit, member
-- "<score>-<n>", scored with its time in Unix microseconds (see the window
-- package's SlidingLog and the module's runSlidingLog).

local MAX_SCORE = 9007199254740992 -- 2^53 µs, the year 2255

-- read_zset returns what the module reads of a sorted-set state: its type
-- ('none', 'zset' or 'other'), expiry (Unix ms, -1: none) and size.
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
-- write, redate, expire (ns), add and remove (entries)} or an error; with
-- debt, a charge (SlidingLog.Charge) added past the limit; a cost < 0 returns.
local function log_hit(cost, debt, key, size, L, window, now, cutoff_us)
  local W = mul(window, SECOND)
  local now_us = now[1] * 1000000 + math.floor(now[2] / 1000)
  local n = now_ns(now)
  local d = {limited = false, retry = -1, write = false, redate = false, add = 0, remove = 0}
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
  if lt(cost, 0) then -- a return: the newest live entries go
    total = imax(total, 0)
    d.remove = sub(live, total)
    d.write = d.write or lt(0, d.remove)
    if lt(0, total) then -- the newest left: the total-th oldest live entry
      local r = redis.call('ZRANGE', key, '(' .. fmt(cutoff_us), '+inf', 'BYSCORE', 'LIMIT', fmt(sub(total, 1)), '1', 'WITHSCORES')
      newest = imin(score_ns(tonumber(r[2])), n)
    end
  elseif lt(L, cost) or lt(L, total) then
    d.limited = true
    local charge = debt and lt(0, cost)
    if le(cost, L) or charge then
      local k = sub(total, L) -- the oldest entry to leave; one more for a unit after a charge
      if charge then k = add(k, 1) end
      local r = redis.call('ZRANGE', key, '(' .. fmt(cutoff_us), '+inf', 'BYSCORE', 'LIMIT', fmt(sub(k, 1)), '1', 'WITHSCORES')
      local nth = r[2] and score_ns(tonumber(r[2])) or nil
      if nth == nil or lt(n, nth) then nth = n end
      d.retry = sub(add(nth, W), n)
    end
    if charge and lt(add(L, MAX_LOG_ADD), total) then return nil, nil, nil, fail(text(T_DEBT_RANGE, fmt(cost))) end
    if charge then d.write, newest, d.add = true, n, cost else total = live end
  elseif lt(0, cost) then
    d.write, newest, d.add = true, n, cost
  end
  d.remaining = imin(imax(sub(L, total), 0), L)
  d.reset = 0
  if lt(0, total) then
    d.expire = add(newest, W)
    if not fits(d.expire) then return nil, nil, nil, fail(WINDOW_OVERFLOW) end
    d.reset = sub(d.expire, n)
  else
    d.expire = n
  end
  return d
end
-- log_limit runs a sliding log on its key (the first argument, the family,
-- is the same for every log): the five integers and the write, or an error.
local function log_limit(_, key, v, reserve, now, ms)
  local L, window, cost = v[1], v[2], v[3]
  if reserve == DEBT and lt(MAX_LOG_ADD, cost) then return nil, nil, fail(text(T_LOG_ADD, MAX_LOG_ADD, fmt(cost))) end
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
  local d, _, _, herr = reserved(log_hit, cost, reserve, key, size, L, window, now, cutoff_us)
  if herr then return nil, nil, herr end
  local reply = five(d.limited, L, d.remaining, d.retry, d.reset, ms)
  if not d.write then return reply, {key = key} end
  return reply, {key = key, log = true, cutoff = cutoff_us, redate = d.redate, add = d.add, remove = d.remove,
    score = now[1] * 1000000 + math.floor(now[2] / 1000), expire = d.expire}
end
-- log_store makes a sliding log's write, when there is one, as the module
-- does: remove the entries that left the window, move those dated after now
-- to now (a clock that stepped back), add the new entries "<score>-<n>"
-- numbered from the set's size, skipping members that exist, remove the
-- newest w.remove (a return), and expire the key at its newest entry's end,
-- rounded up to the ms.
local function log_store(w)
  if not w.log then return end
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
  if lt(0, w.remove) then redis.call('ZREMRANGEBYRANK', w.key, fmt(neg(w.remove)), '-1') end -- a return
  local q, r = quorem(w.expire, 1000000)
  if lt(0, r) then q = add(q, 1) end
  redis.call('PEXPIREAT', w.key, fmt(q))
end
-- fast_entry is log_entry for the fast path: true only for an entry
-- log_entry accepts ("<score>-<n>", its score's digits, n of at most 18
-- digits); false sends the call to the exact path, which decides.
local function fast_entry(member, score)
  if #member > 63 or not state_score(score) then return false end
  local p = string.format('%d', score) .. '-'
  return #member - #p <= 18 and string.sub(member, 1, #p) == p and string.find(member, '^%d+$', #p + 1) ~= nil
end
-- fast_log is log_limit and store_log on plain numbers, for the common call
-- (fast_args: a cost of 0 or more, no RESERVE) on the common key (empty, or
-- a log whose ends are its own, that expires, within 104 days of now) and
-- windows below 9000000 s: ns from now stay below 2^53, exact in a double.
-- It skips the calls whose answer it knows (the newest read once, ZCOUNT
-- and the trim when the oldest is live, ZCARD after the trim). It gives the
-- reply (or WRONGTYPE), or nil for the exact path; it writes when it decides.
local function fast_log(_, key, v, now, ms, peek)
  local L, window, cost = v[1], v[2], v[3]
  if window >= 9000000 or now[1] >= MAX_SECONDS - 2 * 9000000 then return nil end
  local size = redis.pcall('ZCARD', key)
  if type(size) == 'table' then return fail(WRONGTYPE) end
  local now_us = now[1] * 1000000 + math.floor(now[2] / 1000)
  local sub_us = math.fmod(now[2], 1000) -- now in ns is now_us * 1000 + sub_us
  local cutoff_us = now_us - window * 1000000
  local W = window * SECOND
  local live, first_us, newest = 0, nil, nil -- newest: the newest entry, in ns from now
  if size > 0 then
    if redis.call('PEXPIRETIME', key) < 0 then return nil end
    local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
    local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    first_us = tonumber(first[2])
    local last_us = tonumber(last[2])
    if not fast_entry(first[1], first_us) or not fast_entry(last[1], last_us) then return nil end
    if math.abs(last_us - now_us) >= 9000000000000 then return nil end
    newest = (last_us - now_us) * 1000 - sub_us
    if first_us > cutoff_us then
      live = size
    else
      live = redis.call('ZCOUNT', key, '(' .. string.format('%d', cutoff_us), '+inf')
    end
  end
  local write, redate, added = false, false, 0
  if newest and newest > 0 then newest, redate, write = 0, true, true end
  local total = live + cost
  local limited, retry = false, -1
  if cost > L or total > L then
    limited = true
    if cost <= L then
      local r = redis.call('ZRANGE', key, '(' .. string.format('%d', cutoff_us), '+inf', 'BYSCORE', 'LIMIT',
        string.format('%d', total - L - 1), '1', 'WITHSCORES')
      local nth = 0
      if r[2] then
        local us = tonumber(r[2])
        if us ~= math.floor(us) or math.abs(us - now_us) >= 9000000000000 then return nil end
        nth = (us - now_us) * 1000 - sub_us
        if nth > 0 then nth = 0 end
      end
      retry = nth + W
    end
    total = live
  elseif cost > 0 then
    write, newest, added = true, 0, cost
  end
  local remaining, reset = L - total, 0
  if remaining < 0 then remaining = 0 elseif remaining > L then remaining = L end
  if total > 0 then reset = newest + W end -- the key's work ends then
  if write and not peek then
    local score = string.format('%d', now_us)
    if first_us and first_us <= cutoff_us then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', cutoff_us))
    end
    local moved = 0
    if redate then moved = redis.call('ZREMRANGEBYSCORE', key, '(' .. score, '+inf') end
    local want, seq = added + moved, live - moved -- seq: what ZCARD answers now
    while want > 0 do
      local batch = {key, 'NX'}
      local k = want
      if k > 64 then k = 64 end
      for i = 0, k - 1 do
        batch[#batch + 1] = score
        batch[#batch + 1] = score .. '-' .. string.format('%d', seq + i)
      end
      seq = seq + k
      want = want - redis.call('ZADD', unpack(batch))
    end
    local x = now[2] + reset -- the key expires at now + reset, rounded up to the ms
    local r = math.fmod(x, 1000000)
    local q = now[1] * 1000 + (x - r) / 1000000
    if r > 0 then q = q + 1 end
    redis.call('PEXPIREAT', key, string.format('%d', q))
  end
  return {limited and 1 or 0, L, remaining, fast_time(retry, ms), fast_time(reset, ms)}
end
