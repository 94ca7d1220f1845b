-- Moves a quiet partition's watermark as a resolved event would (TICDC_SINK_RESOLVE_WHEN_IDLE):
-- the watermark and its replay mark, at the last staged offset. Only while that offset is still
-- the staged one (nothing staged since the worker looked), nothing is held, and only forward.
-- KEYS: offsets, watermarks, held-ts, resolved:<tp>; ARGV: partition, staged offset, watermark.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return 0
end
local current = redis.call('HGET', KEYS[2], ARGV[1])
if current and ARGV[3] <= current then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[4], 0, ARGV[3] .. string.format('%016x', tonumber(ARGV[2])))
return 1
