-- Deletes a partition's oldest rows below a bound, at most ARGV[2] of them, and takes them off
-- the staged totals; returns how many. Inside Redis, so no row travels to the sink and back.
-- KEYS: rows:<tp>, staged; ARGV: the ZRANGEBYLEX bound, the page size.
local page = redis.call('ZRANGEBYLEX', KEYS[1], '-', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #page == 0 then
  return 0
end
local bytes = 0
for _, member in ipairs(page) do
  bytes = bytes + #member
end
redis.call('ZREMRANGEBYLEX', KEYS[1], '-', '[' .. page[#page])
redis.call('HINCRBY', KEYS[2], 'rows', -#page)
redis.call('HINCRBY', KEYS[2], 'bytes', -bytes)
return #page
