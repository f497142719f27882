# PGXS makefile of make bench-web's probe (redis_ping.c), used by web.sh
# from its work directory: make -f .../redis_ping.mk PG_CONFIG=...
MODULE_big = redis_ping
OBJS = redis_ping.o
SHLIB_LINK = -lhiredis
PG_CONFIG ?= pg_config
# no bitcode for the JIT: nothing calls it in a plan worth compiling
override with_llvm = no
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
