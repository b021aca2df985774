-- The recipe's release: remove the id. KEYS[1]; ARGV: id.
return redis.call('ZREM', KEYS[1], ARGV[1])
