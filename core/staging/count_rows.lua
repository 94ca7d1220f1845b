-- Counts the rows of one page of a partition's row members, from a ZRANGEBYLEX bound on; returns
-- {members, rows, the page's last member}: a page at a time, so a big backlog never holds Redis
-- long. KEYS: rows:<tp>; ARGV: the lower bound, the page size in members.
-- A member holds its row count (4 hex) after its 36-byte prefix (core/staging/layout.py).
local page = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], '+', 'LIMIT', 0, tonumber(ARGV[2]))
if #page == 0 then
  return {0, 0, ''}
end
local rows = 0
for _, member in ipairs(page) do
  rows = rows + tonumber(string.sub(member, 37, 40), 16)
end
return {#page, rows, page[#page]}
