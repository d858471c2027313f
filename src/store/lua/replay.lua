-- A delivery's read: the stream's record (so the replica checks its epoch on the very state
-- the events come from), the store's clock, and up to ARGV[2] events after ARGV[1], packed in
-- one string as `SEQ LEN\n` + data per event: one reply value instead of thousands.
-- KEYS[1] meta, KEYS[2] stream, KEYS[3] log
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local fields = redis.call('HGETALL', KEYS[2])
if #fields == 0 then return {0, now} end
local first = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', 1)
local oldest = ''
if #first > 0 then oldest = first[1][1] end
local entries = redis.call('XRANGE', KEYS[3], '(' .. ARGV[1] .. '-1', '+', 'COUNT', ARGV[2])
local packed = {}
for i, entry in ipairs(entries) do
  local seq = string.sub(entry[1], 1, -3)
  local data = entry[2][2]
  packed[i] = seq .. ' ' .. #data .. '\n' .. data
end
return {1, now, oldest, fields, table.concat(packed)}
