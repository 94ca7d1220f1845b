-- Adds a message's row members outside the stage script (a dead letter replayed, a held message
-- once it decodes) and counts in `staged` only those not staged already: a replay run twice, or
-- a held message staged again after a crash, must not leave rows in the totals that trim never
-- takes off. KEYS: rows:<tp>, staged, layout; ARGV: the member layout, then each member and its
-- row count. Returns the rows added.
redis.call('SET', KEYS[3], ARGV[1])
local rows, bytes = 0, 0
for i = 2, #ARGV, 2 do
  if redis.call('ZADD', KEYS[1], 'NX', 0, ARGV[i]) == 1 then
    rows = rows + tonumber(ARGV[i + 1])
    bytes = bytes + #ARGV[i]
  end
end
if rows > 0 then
  redis.call('HINCRBY', KEYS[2], 'rows', rows)
  redis.call('HINCRBY', KEYS[2], 'bytes', bytes)
end
return rows
