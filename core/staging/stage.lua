-- Records consecutive messages of one partition, each as one unit with its offset; a message at
-- or below the partition's staged offset (a replay) is not counted again. It runs in the same
-- MULTI as the ZADD of the messages' rows, which stays outside Lua: handing each row through a
-- script's arguments cost Redis more than the insert itself.
-- KEYS: offsets, watermarks, ddl, staged, ddl-ids, resolved:<tp> (core/staging/writer.py).
-- ARGV: partition, message count, then per message (layout.MESSAGE_ARGS): offset, watermark
-- ('' for none), rows, their bytes, the DDL count; and per DDL (layout.DDL_ARGS) its commit ts,
-- identity and body. Returns 1 when any message was staged, else 0.
local staged = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
local first_staged = staged
local rows_added, bytes_added = 0, 0
local i = 3
for _ = 1, tonumber(ARGV[2]) do
  local offset, mark, ddls = tonumber(ARGV[i]), ARGV[i + 1], tonumber(ARGV[i + 4])
  if offset > staged then
    for j = i + 5, i + 2 + 3 * ddls, 3 do
      -- A DDL is staged once, the first time any partition delivers it; its sequence number
      -- keeps DDLs that share a commit ts (one split job) in the order the job ran them.
      local id = ARGV[j] .. ARGV[j + 1]
      if not redis.call('HGET', KEYS[5], id) then
        local seq = string.format('%08x', redis.call('HINCRBY', KEYS[5], '#seq', 1))
        redis.call('HSET', KEYS[5], id, seq)
        redis.call('ZADD', KEYS[3], 0, ARGV[j] .. seq .. ARGV[j + 2])
      end
    end
    if mark ~= '' then
      local current = redis.call('HGET', KEYS[2], ARGV[1])
      if (not current) or mark > current then
        redis.call('HSET', KEYS[2], ARGV[1], mark)
        redis.call('ZADD', KEYS[6], 0, mark .. string.format('%016x', offset))
      end
    end
    staged = offset
    rows_added = rows_added + tonumber(ARGV[i + 2])
    bytes_added = bytes_added + tonumber(ARGV[i + 3])
  end
  i = i + 5 + 3 * ddls
end
if staged == first_staged then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', staged))
if rows_added > 0 then
  redis.call('HINCRBY', KEYS[4], 'rows', rows_added)
  redis.call('HINCRBY', KEYS[4], 'bytes', bytes_added)
end
return 1
