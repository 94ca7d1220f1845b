-- Keeps the smallest commit ts held per partition: that partition's progress stops below it.
-- KEYS: held-ts; ARGV: partition, commit ts (16 hex).
local current = redis.call('HGET', KEYS[1], ARGV[1])
if (not current) or ARGV[2] < current then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
