# seckill — flash-sale inventory service.
#   make            build build/seckill
#   make test       install what is missing, build, run every test
#   make demo       install what is missing, build, run the multi-instance proof
#   make bench      install what is missing, build, the performance report (~8 min;
#                   BENCH_QUICK=1: a 1 s-per-step smoke test; BENCH_ARGS: loadtest/bench.sh options)
#   make bench BASE=REV  this checkout against commit REV (built in a throwaway git
#                   worktree): BENCH_ROUNDS alternating rounds (3) of loadtest/bench.sh,
#                   BASE then HEAD, medians and ranges and HEAD/BASE of the medians
#                   (loadtest/compare.sh; results/compare-latest/compare.json)
#   make SANITIZER=address|undefined|thread test
#   make valgrind   the server under valgrind through a short workload, no leak allowed
#   make chaos      the fault matrix (loadtest/chaos.sh): each fault against each lock
#                   mode, CHAOS_REPS times (10), each on a fresh cluster
#                   (CHAOS_QUICK=1: CI's short pass, every fault once against one mode)
#   make jepsen     random combined faults on a network of namespaces, every request
#                   recorded and the history checked (loadtest/jepsen.sh; JEPSEN_TIME
#                   seconds a run (30), JEPSEN_RUNS (1), JEPSEN_SEED, JEPSEN_ROWS;
#                   JEPSEN_QUICK=1: CI's short pass, each row once for 25 s)
#   make install    the binary, seckill(8) and the systemd unit under $(DESTDIR)$(PREFIX)
#   make uninstall  removes them

PREFIX ?= /usr/local
CC ?= cc
CFLAGS ?= -O2 -g
WARNINGS = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers -Wno-format-truncation
STD = -std=c11 -D_GNU_SOURCE -pthread

SANITIZER ?=
ifeq ($(SANITIZER),)
BUILD = build
SAN_FLAGS =
else ifeq ($(SANITIZER),address)
BUILD = build/address
SAN_FLAGS = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
else ifeq ($(SANITIZER),undefined)
BUILD = build/undefined
SAN_FLAGS = -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
else ifeq ($(SANITIZER),thread)
BUILD = build/thread
SAN_FLAGS = -fsanitize=thread -fno-omit-frame-pointer
else ifeq ($(SANITIZER),coverage)
# Not a sanitizer: gcov's counters, for make coverage (line coverage of the core folders).
BUILD = build/coverage
SAN_FLAGS = --coverage
else
$(error SANITIZER must be address, undefined, thread or coverage)
endif

# libcrypto: HMAC-SHA256 of buyer tokens and of the waiting room's tickets and
# passes (util/hmac.c)
PKGS = libmicrohttpd hiredis jansson libevent libevent_pthreads libsystemd libpq libcrypto
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)
# The ZooKeeper C client (Debian libzookeeper-st-dev, <zookeeper/zookeeper.h>)
# has no .pc file; its single-threaded flavour (no THREADED) is driven by our
# own event loop (lock/zk_loop.c). Linked by its soname: the runtime package
# (libzookeeper-st2) stays when libzookeeper-mt-dev, which conflicts with
# libzookeeper-st-dev and ships the same header, replaces it.
ZK_CFLAGS =
ZK_LIBS = -l:libzookeeper_st.so.2

ALL_CFLAGS = $(STD) $(WARNINGS) $(CFLAGS) $(SAN_FLAGS) $(PKG_CFLAGS) $(ZK_CFLAGS) -Iutil -Iredis -Ipg -Ilock -Iinventory -Iservice
ALL_LDFLAGS = $(LDFLAGS) $(SAN_FLAGS) -pthread
LIBS = $(PKG_LIBS) $(ZK_LIBS) -lm

# The Lua scripts (lock/lua/, inventory/lua/) become C sources at build time:
# scripts/lua2c.awk resolves `--#include "piece.lua"` lines and writes the
# script's text with a map from its lines to the .lua files and lines (see
# struct rscript_source in redis/rconn.h). It also writes each assembled script
# as $(BUILD)/gen/<dir>/lua/<name>.lua, to run by hand with redis-cli --eval.
LUA_SRC := $(wildcard lock/lua/*.lua inventory/lua/*.lua)
LUA_C := $(LUA_SRC:%.lua=$(BUILD)/gen/%.c)
LUA_OBJ := $(LUA_C:%.c=%.o)
LUA_COPY := $(LUA_SRC:%=$(BUILD)/gen/%)

LIB_SRC := $(wildcard util/*.c redis/*.c pg/*.c lock/*.c inventory/*.c) $(filter-out service/main.c,$(wildcard service/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(LUA_OBJ)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TESTUTIL_OBJ := $(BUILD)/obj/tests/testutil.o $(BUILD)/obj/tests/invfix.o

.PHONY: all deps test check test-stress coverage demo bench chaos jepsen soak fuzz valgrind clean install uninstall format
all: $(BUILD)/seckill $(LUA_COPY)

# `make V=1` shows the full commands.
ifeq ($(V),1)
Q =
say = @true
else
Q = @
say = @printf '  %-6s %s\n'
endif

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# Any .lua may be included by another of its directory: all of them are
# prerequisites of each.
$(BUILD)/gen/%.c: %.lua $(LUA_SRC) scripts/lua2c.awk
	@mkdir -p $(dir $@)
	$(say) LUA $<
	$(Q)awk -v mode=c -v src=$< -f scripts/lua2c.awk > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/%.lua: %.lua $(LUA_SRC) scripts/lua2c.awk
	@mkdir -p $(dir $@)
	$(Q)awk -v mode=lua -v src=$< -f scripts/lua2c.awk > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/%.o: $(BUILD)/gen/%.c
	$(say) CC $<
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# What --version and /metrics' seckill_build_info say: git's description and
# commit, or given (make SECKILL_VERSION=1.2.0 SECKILL_COMMIT=abc123). The stamp
# changes only when they do, and rebuilds version.o then.
SECKILL_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
SECKILL_COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
$(BUILD)/gen/version.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo '$(SECKILL_VERSION) $(SECKILL_COMMIT)' | cmp -s - $@ 2>/dev/null || \
		echo '$(SECKILL_VERSION) $(SECKILL_COMMIT)' >$@
$(BUILD)/obj/service/version.o: $(BUILD)/gen/version.stamp
$(BUILD)/obj/service/version.o: ALL_CFLAGS += -DSECKILL_VERSION='"$(SECKILL_VERSION)"' \
	-DSECKILL_COMMIT='"$(SECKILL_COMMIT)"'
.PHONY: FORCE
FORCE:

$(BUILD)/libseckill.a: $(LIB_OBJ)
	@rm -f $@
	$(say) AR $@
	$(Q)ar rcs $@ $^

$(BUILD)/seckill: $(BUILD)/obj/service/main.o $(BUILD)/libseckill.a
	$(say) LINK $@
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TESTUTIL_OBJ) $(BUILD)/libseckill.a
	@mkdir -p $(dir $@)
	$(say) LINK $@
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CMOCKA_LIBS) $(LIBS)

# A test-only TCP proxy that loses exactly one answer (tests/faultproxy.c).
$(BUILD)/tests/faultproxy: tests/faultproxy.c
	@mkdir -p $(dir $@)
	$(say) CC $@
	$(Q)$(CC) $(STD) $(WARNINGS) $(CFLAGS) $(SAN_FLAGS) -o $@ $< $(ALL_LDFLAGS)

# Test-only HTTP clients at the protocol's edges (tests/edgeclient.c, tests/it_edge.sh).
$(BUILD)/tests/edgeclient: tests/edgeclient.c
	@mkdir -p $(dir $@)
	$(say) CC $@
	$(Q)$(CC) $(STD) $(WARNINGS) $(CFLAGS) $(SAN_FLAGS) -o $@ $< $(ALL_LDFLAGS) -lpthread

# The buyer of the fault matrix (loadtest/chaosclient.c, loadtest/chaos.sh).
$(BUILD)/loadtest/chaosclient: loadtest/chaosclient.c util/rfc3339.c util/rfc3339.h
	@mkdir -p $(dir $@)
	$(say) CC $@
	$(Q)$(CC) $(STD) $(WARNINGS) $(CFLAGS) $(SAN_FLAGS) -Iutil -o $@ $< util/rfc3339.c $(ALL_LDFLAGS)

# The waiting room's buyers, all on one event loop (loadtest/roomclient.c, loadtest/room.sh).
$(BUILD)/loadtest/roomclient: loadtest/roomclient.c
	@mkdir -p $(dir $@)
	$(say) CC $@
	$(Q)$(CC) $(STD) $(WARNINGS) $(CFLAGS) $(SAN_FLAGS) $(PKG_CFLAGS) -o $@ $< $(ALL_LDFLAGS) \
		$(shell pkg-config --libs libevent jansson)

deps:
	@scripts/deps.sh

# The targets below build with one compiler a core unless make was given -j itself
# (the README's commands are a plain `make test` and `make demo`).
NPROC := $(shell nproc 2>/dev/null || echo 2)
SUBMAKE = $(MAKE) --no-print-directory $(if $(findstring j,$(filter-out --%,$(MAKEFLAGS))),,-j$(NPROC))

# The README's second command: set-up is part of it.
test: deps
	@$(SUBMAKE) check

# The assembled scripts too: a test names a script by its SHA (tests/it_acked.sh).
# TEST_JOBS: tests side by side (tests/run.sh -j; its default when empty);
# TEST_FILTER: only the tests whose name contains it.
TEST_JOBS ?=
TEST_FILTER ?=
check: $(BUILD)/seckill $(LUA_COPY) $(TEST_BIN) $(BUILD)/tests/faultproxy $(BUILD)/tests/edgeclient \
	$(BUILD)/loadtest/roomclient
	@SECKILL_BUILD=$(BUILD) tests/run.sh $(if $(TEST_JOBS),-j $(TEST_JOBS)) $(TEST_FILTER)

# The suite while busy loops take every core (stress-ng, started and stopped by
# tests/run.sh): a test that fails on a busy machine is a broken test.
test-stress: deps
	@SECKILL_TEST_STRESS=1 $(SUBMAKE) check

# Line coverage of service/, inventory/, lock/ and redis/ under the whole suite
# (gcov counters in build/coverage, lcov's summary; results/coverage/).
coverage: deps
	@DEPS_EXTRA="lcov" scripts/deps.sh
	@find build/coverage -name '*.gcda' -delete 2>/dev/null || true
	@$(SUBMAKE) SANITIZER=coverage check; rc=$$?; \
		scripts/coverage.sh build/coverage results/coverage && exit $$rc

# memcheck over the unsanitized server (valgrind and the sanitizers do not mix):
# every lock mode through a short real workload; fails on any error or leak.
valgrind: deps
	@DEPS_EXTRA="valgrind" scripts/deps.sh
	@$(SUBMAKE) SANITIZER= all
	@SECKILL_BUILD=build tests/valgrind.sh $(VALGRIND_MODES)

# The README's first command: the oversell report, then one sale with reservations
# (redis mode, a 2 s payment window, 60% of buyers pay): its stock resold until paid;
# then the waiting room (loadtest/room.sh): 20,000 buyers in one burst, part before the
# sale's start, for 300 units at 30 a second (DEMO_ROOM_ARGS: its options).
DEMO_ROOM_ARGS ?=
DEMO_LIFE_ARGS ?= --modes redis --stock 300 --duration 12s --pay-ratio 0.6 \
	--pay-within-ms 2000 --pay-delay-ms 500 --no-chart
demo: deps
	@$(SUBMAKE) all $(BUILD)/loadtest/roomclient
	@loadtest/run.sh $(DEMO_ARGS)
	@loadtest/run.sh --quiet $(DEMO_LIFE_ARGS)
	@SECKILL_BUILD=$(BUILD) loadtest/room.sh $(DEMO_ROOM_ARGS)

# Every system side by side through the same balancer: table, results/bench-latest/;
# then one hot SKU at K=16, 1024 and 1 (loadtest/segments.sh): results/segments-latest/;
# then one hot SKU on a Redis Cluster of 1 and of 3 masters (loadtest/shards.sh):
# results/shards-latest/.
# With BASE=REV: bench.sh only (BENCH_ARGS too), BENCH_ROUNDS times for the server of
# REV and for this one, alternating (loadtest/compare.sh): results/compare-latest/.
BASE ?=
BENCH_ROUNDS ?= 3
bench: deps
	@$(MAKE) --no-print-directory all
ifeq ($(BASE),)
	@SECKILL_BUILD=$(BUILD) BENCH_QUICK=$(BENCH_QUICK) loadtest/bench.sh $(BENCH_ARGS)
	@SECKILL_BUILD=$(BUILD) BENCH_QUICK=$(BENCH_QUICK) loadtest/segments.sh
	@SECKILL_BUILD=$(BUILD) BENCH_QUICK=$(BENCH_QUICK) loadtest/shards.sh
else
	@SECKILL_BUILD=$(BUILD) BENCH_QUICK=$(BENCH_QUICK) BENCH_ROUNDS=$(BENCH_ROUNDS) \
		SANITIZER=$(SANITIZER) loadtest/compare.sh --base '$(BASE)' $(BENCH_ARGS)
endif

# The fault matrix: faults x lock modes, CHAOS_REPS runs each; results/chaos-latest/.
# CHAOS_QUICK=1: the short pass (loadtest/chaos.sh --quick), 16 cells (3 of the lifecycle).
CHAOS_REPS ?= 10
CHAOS_QUICK ?=
chaos: deps
	@$(SUBMAKE) all $(BUILD)/tests/faultproxy $(BUILD)/loadtest/chaosclient
	@SECKILL_BUILD=$(BUILD) CHAOS_REPS=$(CHAOS_REPS) loadtest/chaos.sh $(if $(CHAOS_QUICK),--quick) $(CHAOS_ARGS)

# Jepsen's way: random combined faults, partitions through network namespaces, the
# clients' history checked (loadtest/jepsen.sh); results/jepsen-latest/.
JEPSEN_TIME ?= 30
JEPSEN_RUNS ?= 1
JEPSEN_QUICK ?=
jepsen: deps
	@$(SUBMAKE) all $(BUILD)/loadtest/chaosclient
	@SECKILL_BUILD=$(BUILD) loadtest/jepsen.sh --time $(JEPSEN_TIME) --runs $(JEPSEN_RUNS) \
		$(if $(JEPSEN_SEED),--seed $(JEPSEN_SEED)) $(if $(JEPSEN_ROWS),--rows $(JEPSEN_ROWS)) \
		$(if $(JEPSEN_QUICK),--quick) $(JEPSEN_ARGS)

# A shop, not a sale (loadtest/soak.sh): SOAK_SKUS SKUs (10000) in waves on a Redis
# Cluster of 3 masters with --postgres, sold, paid, cancelled, expired, then retired;
# the sweep's lateness, the sink's lag, Redis's keys, memory and idle CPU; minutes.
soak: deps
	@$(SUBMAKE) all
	@SECKILL_BUILD=$(BUILD) loadtest/soak.sh $(SOAK_ARGS)

# libFuzzer (clang) over request parsing and validation, bounded in time.
FUZZ_SECONDS ?= 60
FUZZ_SRC = service/request.c service/routes.c service/answers.c service/room_routes.c service/room_page.c service/buyer.c service/metrics.c service/durability.c service/conns.c service/health.c service/reach.c service/store.c service/sku_patch.c service/sink.c service/sink_batch.c \
	service/log.c service/version.c $(wildcard util/*.c redis/*.c pg/*.c lock/*.c inventory/*.c) $(LUA_C)
build/fuzz/fuzz_request: fuzz/fuzz_request.c $(FUZZ_SRC)
	@mkdir -p $(dir $@)
	$(say) FUZZ $@
	$(Q)clang $(STD) -g -O1 -fsanitize=fuzzer,address,undefined $(PKG_CFLAGS) $(ZK_CFLAGS) -Iutil -Iredis \
		-Ilock -Ipg -Iinventory -Iservice -o $@ $^ $(PKG_LIBS) $(ZK_LIBS) -lm

fuzz:
	@DEPS_EXTRA="clang libclang-rt-14-dev" scripts/deps.sh
	@$(MAKE) --no-print-directory build/fuzz/fuzz_request
	@mkdir -p build/fuzz/corpus fuzz/crashes
	build/fuzz/fuzz_request -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
		-artifact_prefix=fuzz/crashes/ -print_final_stats=1 build/fuzz/corpus fuzz/corpus

clean:
	rm -rf build

# The binary, its manual page and its systemd unit (ExecStart naming the binary
# installed): make install PREFIX=/usr DESTDIR=pkg/ for a package's tree.
BINDIR = $(PREFIX)/bin
MAN8DIR = $(PREFIX)/share/man/man8
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
install: $(BUILD)/seckill
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MAN8DIR) $(DESTDIR)$(SYSTEMD_UNIT_DIR)
	install -m 755 $(BUILD)/seckill $(DESTDIR)$(BINDIR)/seckill
	install -m 644 docs/seckill.8 $(DESTDIR)$(MAN8DIR)/seckill.8
	sed 's|^ExecStart=/usr/local/bin/seckill|ExecStart=$(BINDIR)/seckill|' \
		scripts/seckill.service >$(BUILD)/seckill.service
	install -m 644 $(BUILD)/seckill.service $(DESTDIR)$(SYSTEMD_UNIT_DIR)/seckill.service

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/seckill $(DESTDIR)$(MAN8DIR)/seckill.8 \
		$(DESTDIR)$(SYSTEMD_UNIT_DIR)/seckill.service

format:
	clang-format -i util/*.[ch] redis/*.[ch] lock/*.[ch] inventory/*.[ch] service/*.[ch] tests/*.[ch]

# Keep the objects of the test binaries: no relink on the next make.
.SECONDARY:

-include $(shell find build -name '*.d' 2>/dev/null)
