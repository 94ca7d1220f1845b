-- Records that a topic's table went away at a commit ts (core/staging/retired.py), forward only:
-- a replayed older DROP or RENAME TABLE does not take back a later one.
-- KEYS: retired; ARGV: topic, commit ts (16 hex).
local current = redis.call('HGET', KEYS[1], ARGV[1])
if (not current) or ARGV[2] > current then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
