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
  local v, ms, reserve, err = parse_one(syntax(kind), args, name)
  if err then return err end
  now = now or clock()
  local w
  reply, w, err = f.limit(kind, keys[1], v, reserve, now, ms)
  if err then return err end
  if not peek then f.store(w, now) end
  return reply
end
