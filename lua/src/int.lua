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
