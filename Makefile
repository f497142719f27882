# slidewin: PGXS build plus the project's own targets.
#
#   make demo    install what is missing, build, install, run the demo
#   make test    install what is missing, build, install, run every suite,
#                the sanitize pass included (test/run_all.sh)
#   make test-matrix  the suite again on the other PostgreSQL majors, each in
#                a Debian chroot made with debootstrap (test/matrix.sh)
#   make sanitize  only the sanitize pass: an ASan+UBSan build in a private
#                installation of its own, and the suites against it
#   make valgrind  the regression suite under valgrind memcheck (not part
#                of make test; slow)
#   make bench   the benchmark (not part of make test)
#   make bench-web  slidewin beside rate-limiter-flexible and express-rate-limit
#                in an Express app under autocannon (not part of make test,
#                which runs its smoke)
#   make check-layers  the layer rules of src/ (src/LAYERS, test/check_layers.pl)
#   make soak    build, install, then the randomized exactness soak (TAP
#                140_soak, test/perl/SlidewinSoak.pm) for SOAK_SECONDS
#                (default 600); SOAK_SEED replays a run; prints PASS or FAIL
#   make fuzz    build the libFuzzer targets (test/fuzz) and run each for
#                FUZZ_SECONDS (default 60); make test runs them briefly
#   make unit    build and run the unit tests of the pure files (test/unit);
#                no server, no installation; make test runs them too
#   make deb     the Debian packages postgresql-NN-slidewin, one for each
#                installed postgresql-server-dev-NN (debian/, pg_buildext),
#                into DEB_DIR (default build/deb; test/build_deb.sh)
#
# PGXS is included only when pg_config can find it, so that `make demo` and
# `make test` work on a machine where the server headers are not yet installed:
# they install them first and then call make again.

MODULE_big = slidewin
# The layers of src/, from the ground up (src/LAYERS; make check-layers).
LAYER_DIRS = src src/base src/transport src/store/redis src/store/fallback src/switch src/sql
OBJS = $(patsubst %.c,%.o,$(sort $(foreach d,$(LAYER_DIRS),$(wildcard $(d)/*.c))))
EXTENSION = slidewin
DATA = sql/slidewin--1.0.sql sql/slidewin--1.0--1.1.sql sql/slidewin--1.1--1.2.sql sql/slidewin--1.2--1.3.sql sql/slidewin--1.3--1.4.sql sql/slidewin--1.4--1.5.sql sql/slidewin--1.5--1.6.sql sql/slidewin--1.6--1.7.sql sql/slidewin--1.7--1.8.sql sql/slidewin--1.8--1.9.sql sql/slidewin--1.9--1.10.sql sql/slidewin--1.10--1.11.sql sql/slidewin--1.11--1.12.sql sql/slidewin--1.12--1.13.sql sql/slidewin--1.13--1.14.sql sql/slidewin--1.14--1.15.sql sql/slidewin--1.15--1.16.sql sql/slidewin--1.16--1.17.sql sql/slidewin--1.17--1.18.sql
PG_CPPFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare $(addprefix -I,$(LAYER_DIRS))
SHLIB_LINK = -lhiredis -lanl -lssl -lcrypto
EXTRA_CLEAN = test/fuzz/build src/store/redis/lua_scripts.h

REGRESS = $(patsubst sql/%.sql,%,$(sort $(filter-out sql/slidewin--%,$(wildcard sql/*.sql))))
REGRESS_OPTS = --inputdir=. --load-extension=slidewin

# The server is the one PG_CONFIG names, as PGXS has it: `make
# PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config test`. Unset, Debian's
# pg_config (the newest postgresql-server-dev installed).
#
# SLIDEWIN_PRIVATE_ROOT=DIR builds, installs and tests against a private copy
# of that PostgreSQL installation under DIR (made by test/private_pg.sh), so
# the system's library directory is never touched.
PG_CONFIG ?= pg_config
ifneq ($(SLIDEWIN_PRIVATE_ROOT),)
override SLIDEWIN_PRIVATE_ROOT := $(abspath $(SLIDEWIN_PRIVATE_ROOT))
SYSTEM_PG_CONFIG := $(if $(findstring $(SLIDEWIN_PRIVATE_ROOT),$(PG_CONFIG)),$(SYSTEM_PG_CONFIG),$(PG_CONFIG))
override PG_CONFIG := $(SLIDEWIN_PRIVATE_ROOT)$(shell $(SYSTEM_PG_CONFIG) --bindir 2>/dev/null)/pg_config
export SLIDEWIN_PRIVATE_ROOT PG_CONFIG SYSTEM_PG_CONFIG
endif
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
endif

# PGXS does not track header dependencies unless the server was configured
# with --enable-depend: rebuild every object when any header changes.
ifneq ($(PGXS),)
$(OBJS): $(filter-out src/store/redis/lua_scripts.h,$(foreach d,$(LAYER_DIRS),$(wildcard $(d)/*.h)))
endif

.PHONY: deps demo test test-matrix deb bench bench-scripts bench-web fuzz unit sanitize valgrind soak check-layers

FUZZ_SECONDS ?= 60

deps:
	@bash test/deps.sh
ifneq ($(SLIDEWIN_PRIVATE_ROOT),)
	@bash test/private_pg.sh $(SLIDEWIN_PRIVATE_ROOT) >/dev/null
endif

demo: deps
	$(MAKE) all
	$(MAKE) install
	@bash test/demo.sh

# make test builds on every CPU: CI calls plain `make test`, and a serial
# build of the library (objects and bitcode) left a core idle.
NPROC := $(shell nproc 2>/dev/null || echo 1)
test: deps
	$(MAKE) -j$(NPROC) all
	$(MAKE) install
	@bash test/run_all.sh

# The whole suite on the other PostgreSQL majors, in Debian chroots (test/matrix.sh).
test-matrix: deps
	@bash test/matrix.sh

sanitize: deps
	@bash test/sanitize.sh

# Debian packages, built in a copy of the tree under DEB_DIR (test/build_deb.sh).
DEB_DIR ?= build/deb
deb:
	@bash test/build_deb.sh $(DEB_DIR)

valgrind: deps
	@bash test/valgrind.sh

bench: deps
	$(MAKE) all
	$(MAKE) install
	@bash test/bench/run.sh

# The house rules of src/ (src/LAYERS): nothing depends upward or sideways,
# no circles of units, read from the includes and the objects' symbols
# (test/check_layers.pl). make test runs it too (test/run_all.sh, "layers").
check-layers: all
	@perl test/check_layers.pl --strict src

# The exactness soak of make test's TAP 140_soak, for longer (test/soak.sh).
soak: deps
	$(MAKE) all
	$(MAKE) install
	@bash test/soak.sh

# What each script costs Redis per call, beside a naive script, in Redis alone:
# microseconds (commandstats), then instructions (callgrind, repeatable).
bench-scripts: deps
	@bash test/bench/scripts.sh 200000 --instructions

# slidewin beside rate-limiter-flexible and express-rate-limit in one Express
# app (test/bench/web.sh): not part of make test, which runs its smoke
bench-web: deps
	@bash test/bench/web.sh

# Built with clang outside PGXS: the targets link only the pure files and hiredis.
fuzz: deps
	@bash test/fuzz/run.sh --seconds $(FUZZ_SECONDS)

# Built with cc and the sanitizers outside PGXS, like the fuzzers.
unit: deps
	@bash test/unit/run.sh

# The Lua scripts: each file of src/store/redis/lua becomes a string macro
# of src/store/redis/lua_scripts.h (a build product), which
# src/store/redis/scripts.c puts together.
LUA_DIR = src/store/redis/lua
LUA_SOURCES = $(sort $(wildcard $(LUA_DIR)/*.lua))
src/store/redis/lua_scripts.h: $(LUA_DIR)/lua2c.pl $(LUA_SOURCES)
	perl $(LUA_DIR)/lua2c.pl $@ $(LUA_SOURCES)
src/store/redis/scripts.o src/store/redis/scripts.bc: src/store/redis/lua_scripts.h
