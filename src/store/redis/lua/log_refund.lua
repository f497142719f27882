--[[ The refund of an entry of the sliding log: after prelude_base.lua and
prelude_log.lua, this head, then log_refund_body.lua.

KEYS[1] log, KEYS[2] ledger; ARGV ts (the score of an entry this backend
recorded), cost, win (us), now (us, or ''), and optionally part: how many
of the entry's units to give back (the unused rest of a local batch; absent:
all of them). See log_refund_body.lua. ]]

local key, lk = KEYS[1], KEYS[2]
local tsa = ARGV[1]
local ts, cost, win = tonumber(tsa), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = clock(ARGV[4])
local part = nil
if ARGV[5] and ARGV[5] ~= '' then part = ARGV[5] + 0 end
