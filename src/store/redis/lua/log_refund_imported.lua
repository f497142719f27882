--[[ The same refund for an entry the fallback store admitted and a carry
imported (log_import.lua): after prelude_base.lua and prelude_log.lua, this
head, then log_refund_body.lua. KEYS[3] the imports, ARGV[5] the name the
entry was imported under, the rest as for log_refund.lua. Its score is
found from the import's (score + win); a name not among the imports (never
carried, or its window over) has nothing to give back. Returns as
log_refund.lua. ]]

local key, lk = KEYS[1], KEYS[2]
local sc = redis.call('ZSCORE', KEYS[3], ARGV[5])
if not sc then return 0 end
local tsa = fmt(sc - ARGV[3])
local ts, cost, win = tonumber(tsa), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = clock(ARGV[4])
local part = nil
