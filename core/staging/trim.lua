-- Deletes a partition's oldest row members below a bound, at most ARGV[2] of them, and takes
-- their rows and bytes off the staged totals; returns {members, rows} removed. Inside Redis, so
-- no row travels to the sink and back.
-- KEYS: rows:<tp>, staged; ARGV: the ZRANGEBYLEX bound, the page size in members.
-- A member holds its row count (4 hex) after its 36-byte prefix (core/staging/layout.py).
local page = redis.call('ZRANGEBYLEX', KEYS[1], '-', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #page == 0 then
  return {0, 0}
end
local rows, bytes = 0, 0
for _, member in ipairs(page) do
  bytes = bytes + #member
  rows = rows + tonumber(string.sub(member, 37, 40), 16)
end
redis.call('ZREMRANGEBYLEX', KEYS[1], '-', '[' .. page[#page])
redis.call('HINCRBY', KEYS[2], 'rows', -rows)
redis.call('HINCRBY', KEYS[2], 'bytes', -bytes)
return {#page, rows}
