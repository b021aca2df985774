-- The fast parser's parts: most calls are plain digits and an optional MS,
-- which these read without building a syntax; every other call goes to the
-- full parser (parse_one), which reads it the same way and makes its errors.

-- fast_number reads s when it is plain digits, at most 15 of them (below
-- 2^53, so exact, and within 64 bits), as parse would; nil otherwise.
local function fast_number(s)
  if #s > 15 or not string.find(s, '^%d+$') then return nil end
  return tonumber(s)
end
-- fast_tail reads what follows the positional words at args[i]: an optional
-- plain cost within [cmin, cmax] into v[i], then an optional MS. It gives
-- v and ms, or nil for anything else (RESERVE, a sign, an option twice).
local function fast_tail(args, i, v, cmin, cmax)
  local n = #args
  if i <= n then
    local c = fast_number(args[i])
    if c then
      if c < cmin or c > cmax then return nil end
      v[i] = c
      i = i + 1
    end
  end
  if i < n then return nil end
  if i == n then
    local a = args[i]
    if #a ~= 2 or string.upper(a) ~= 'MS' then return nil end
    return v, true
  end
  return v, false
end
