-- luacheck (Debian's lua-check) over slidewin's Lua.  test/luacheck.sh
-- lints each script as Redis receives it, put together out of the files of
-- src/lua as src/scripts.c does, and the library of functions; a file of
-- src/lua alone is only a piece of a script.
--
-- Any change to a script's text changes its SHA1, the name Redis and other
-- servers of the same version know it by; so a finding that only a change
-- of text would silence, where the code is right, is configured off below,
-- with the reason.

std = "lua51+redis"

-- What Redis (6.2, 7.x) and Valkey give a script besides Lua 5.1.
stds.redis = {
	read_globals = { "redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct" },
}

ignore = {
	-- The preludes (prelude_base.lua, prelude_log.lua) define these for
	-- every script that starts with them, and each script uses only some:
	-- unused, or set and never read (clock_s, in a script that records
	-- nothing), in the others.
	"2[13]1/fmt", "2[13]1/keep", "2[13]1/bkeep", "2[13]1/clock_s", "2[13]1/clock",
	"2[13]1/block_end", "2[13]1/keep_block", "2[13]1/blocked",
	"2[13]1/ledger_block", "2[13]1/refunded_upto", "2[13]1/ledger_newest",
	"2[13]1/net_at", "2[13]1/freeing_time", "2[13]1/last_live",
	"2[13]1/trim", "2[13]1/newest", "2[13]1/record", "2[13]1/next_free",
	-- log_peek.lua calls the newest entry it reads `newest`, hiding the
	-- prelude's function of that name, which it does not call.
	"431/newest",
	-- counter_import.lua declares counts and exp with values that every
	-- branch of the if after them replaces.
	"311/counts", "311/exp",
	-- counter_all.lua's scripts wrap a counting algorithm's body in a
	-- function of KEYS and ARGV, on purpose, so that the body reads one
	-- key's keys and arguments; in the library that function is inside the
	-- registered one, whose KEYS and ARGV it hides.
	"432/KEYS", "432/ARGV",
}
