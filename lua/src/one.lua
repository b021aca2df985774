-- one.lua: the commands of one key (GCRA.THROTTLE, TB.TAKE, LB.ENQUEUE,
-- SW.HIT, FW.HIT, SL.HIT and their peeks), whatever their family: its
-- fast path first, then the exact one, then its write. LIMIT (written from
-- the command table, after the families' parts) names each family's
-- functions.

local function one_command(kind, name, peek, keys, args)
  if #keys ~= 1 then return fail('ERR this script takes one key: call it with numkeys 1') end
  local f = LIMIT[kind]
  local reply, now = fast_first(f.fast, kind, keys[1], args, peek)
  if reply then return reply end
  local v, ms, reserve, upto, err, bounds = parse_one(syntax(kind), args, name, not peek, keys[1])
  if err then return err end
  now = now or clock()
  local w, granted
  if upto > 0 then -- the most calls a call of cost 0 leaves room for (limit.remaining)
    reply, w, err = f.limit(kind, keys[1], zero(v), 0, now, ms, bounds)
    if err then return err end
    granted = grant(reply[3], v[#v], reserve, upto)
    if granted > 0 then v[#v] = granted * v[#v] end
  end
  reply, w, err = f.limit(kind, keys[1], v, reserve, now, ms, bounds)
  if err then return err end
  if not peek then f.store(w, now) end
  if granted then reply[#reply + 1] = reply[1] == 1 and 0 or granted end -- a refusal grants none
  return reply
end
