-- Counts the rows of one page of a partition's row members, from a ZRANGEBYLEX bound on; returns
-- {members, rows, the page's last member}: a page at a time, so a big backlog never holds Redis
-- long. KEYS: rows:<tp>; ARGV: the lower bound, the page size in members.
-- A layout-2 member holds its row count (4 hex) after its 36-byte prefix; a layout-1 member
-- holds one row (a msgpack fixarray byte there, never a hex digit).
local page = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], '+', 'LIMIT', 0, tonumber(ARGV[2]))
if #page == 0 then
  return {0, 0, ''}
end
local rows = 0
for _, member in ipairs(page) do
  rows = rows + (tonumber(string.sub(member, 37, 40), 16) or 1)
end
return {#page, rows, page[#page]}
