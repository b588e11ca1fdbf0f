# llm170 — build, test and run. Two entry points for users: `make run`, `make test`.
#
# Layout: common/ + worker/ + proto/ build into one static library that every
# program links; each program's own main lives in client/, daemon/, worker/worker_main.c,
# gateway/. Tests are C programs in tests/ (one binary per test_*.c) plus shell
# tests (tests/*.sh); tests/run.sh runs them all and prints "N passed, N failed".

CC      ?= cc
BUILD   ?= build
BIN     ?= bin
OPT     ?= -O2
CFLAGS  ?=
CFLAGS  += -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror $(OPT) -g -pthread -MMD -MP
LDLIBS  += -lm -ldl -pthread
PKGCONF := pkg-config
MODEL   ?= $(firstword $(wildcard ../shared/data/models/stories260K.gguf))

# libraries from Debian packages (scripts/deps.sh lists them). Expanded when a
# recipe runs, not when make starts: on a fresh machine pkg-config and pcre2
# only exist once `deps` has installed them.
DEP_CFLAGS = $(shell $(PKGCONF) --cflags libpcre2-8 2>/dev/null)
DEP_LIBS   = $(shell $(PKGCONF) --libs libpcre2-8 2>/dev/null || echo -lpcre2-8) -lutf8proc
NET_LIBS   := -lnng -lmsgpackc -ljansson -lmicrohttpd -lsystemd
# the package installer the deps targets run (tests/build_deps.sh replaces it
# to see what waits for it)
DEPS    ?= scripts/deps.sh

# make install
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system
DESTDIR ?=

# worker/: the program (worker_main.c) and one folder per layer of the engine (docs/architecture.md)
LIB_SRC  := $(wildcard common/*.c) $(wildcard worker/*/*.c) $(wildcard proto/*.c)
# generated sources live in the build tree (Makefile.gpu.inc)
KERNELS_GEN := $(BUILD)/gen/hip_kernels_gen.c
SHADERS_GEN := $(BUILD)/gen/vk_shaders_gen.c
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(KERNELS_GEN:%.c=%.o) $(SHADERS_GEN:%.c=%.o)
LIB      := $(BUILD)/libllm170.a

CLI_SRC  := $(wildcard client/*.c)
DAEMON_SRC := $(wildcard daemon/*.c)
WORKER_SRC := worker/worker_main.c
GATEWAY_SRC := $(wildcard gateway/*.c)
PROGRAMS := $(BIN)/llm170
# the service programs appear as their sources land
ifneq ($(DAEMON_SRC),)
PROGRAMS += $(BIN)/llm170d
endif
ifneq ($(wildcard $(WORKER_SRC)),)
PROGRAMS += $(BIN)/llm170-worker
endif
ifneq ($(GATEWAY_SRC),)
PROGRAMS += $(BIN)/llm170-gateway
endif

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_TOOL_SRC := $(wildcard tests/tools/*.c)
TEST_TOOLS := $(TEST_TOOL_SRC:tests/tools/%.c=$(BUILD)/tests/tools/%)

.SECONDARY:
.PHONY: all deps run-deps test-deps test run asan fuzz clean install uninstall FORCE
all: deps $(PROGRAMS) $(TEST_BIN) $(TEST_TOOLS)

# Install missing Debian packages when root, else print the apt-get line:
# `deps` what building and running need, `run-deps` what `make run`'s demo
# adds, `test-deps` what only the tests need (clang, lavapipe, node, numpy …).
# The others wait for deps so that two apt-get never run at once under -j.
deps:
	@$(DEPS) install build
run-deps: deps
	@$(DEPS) install run
test-deps: deps
	@$(DEPS) install test

# The commit for --version (common/version.c), rewritten only when it changes
# so that version.o is rebuilt only then.
VERSION_GEN := $(BUILD)/gen/version_gen.h
$(VERSION_GEN): FORCE
	@mkdir -p $(dir $@)
	@c=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown); \
	printf '#define LLM170_COMMIT "%s"\n' "$$c" >$@.tmp; \
	if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/common/version.o: $(VERSION_GEN)
$(BUILD)/common/version.o: DEP_CFLAGS += -I$(BUILD)/gen

# SIMD kernels: one file per instruction set, chosen at run time.
# Every compile waits for `deps` (order-only: it never makes an object stale):
# under -j the headers (jansson.h …) must be installed before the first one.
$(BUILD)/%_avx2.o: %_avx2.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEP_CFLAGS) -mavx2 -mfma -mf16c -c $< -o $@
$(BUILD)/%_avx512.o: %_avx512.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEP_CFLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c -c $< -o $@
$(BUILD)/%.o: %.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEP_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN)/llm170: $(CLI_SRC:%.c=$(BUILD)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(NET_LIBS) $(DEP_LIBS) $(LDLIBS)

$(BIN)/llm170d: $(DAEMON_SRC:%.c=$(BUILD)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(NET_LIBS) $(DEP_LIBS) $(LDLIBS)

$(BIN)/llm170-worker: $(WORKER_SRC:%.c=$(BUILD)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(NET_LIBS) $(DEP_LIBS) $(LDLIBS)

$(BIN)/llm170-gateway: $(GATEWAY_SRC:%.c=$(BUILD)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(NET_LIBS) $(DEP_LIBS) $(LDLIBS)

$(BUILD)/tests/tools/%: $(BUILD)/tests/tools/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(NET_LIBS) $(DEP_LIBS) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(NET_LIBS) $(DEP_LIBS) $(LDLIBS)

test: all test-deps
	@tests/prepare.sh $(BUILD)
	@tests/run.sh $(BUILD) $(BIN)

# The whole suite again under AddressSanitizer + UBSan, in its own build tree.
asan: test-deps
	$(MAKE) BUILD=build-asan BIN=build-asan/bin OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	        LDLIBS="-lm -ldl -pthread -fsanitize=address,undefined" all
	tests/prepare.sh build-asan
	ASAN_OPTIONS=detect_leaks=1 tests/run.sh build-asan build-asan/bin

# A longer fuzzing session than the one the suite runs.
fuzz:
	FUZZ_RUNS=$${FUZZ_RUNS:-2000000} tests/fuzz.sh

run: all run-deps
	@scripts/run.sh "$(MODEL)"

clean:
	rm -rf build build-asan build-clang bin

# The four programs, the systemd units (ExecStart pointed at BINDIR) and a
# commented sample config, which never replaces one already there.
install: $(PROGRAMS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)/etc/llm170
	install -m 0755 $(PROGRAMS) $(DESTDIR)$(BINDIR)/
	for u in contrib/systemd/*.service; do \
	    sed 's#/usr/bin/llm170#$(BINDIR)/llm170#g' "$$u" >$(DESTDIR)$(UNITDIR)/$${u##*/}.tmp && \
	    chmod 0644 $(DESTDIR)$(UNITDIR)/$${u##*/}.tmp && \
	    mv $(DESTDIR)$(UNITDIR)/$${u##*/}.tmp $(DESTDIR)$(UNITDIR)/$${u##*/} || exit 1; \
	done
	@if [ -e $(DESTDIR)/etc/llm170/llm170.conf ]; then \
	    echo "keeping $(DESTDIR)/etc/llm170/llm170.conf (sample: contrib/llm170.conf)"; \
	else install -m 0644 contrib/llm170.conf $(DESTDIR)/etc/llm170/llm170.conf; fi

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(PROGRAMS)))
	rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(notdir $(wildcard contrib/systemd/*.service)))

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
-include Makefile.gpu.inc
