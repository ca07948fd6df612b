# jitop: `make` builds the libraries, the CLI and the examples (and never
# installs packages); `make test` runs the CPU suite; `make test-gpu` the GPU
# suite; `make demo` the main job. Those (and valgrind, bench, install) first
# check the build dependencies and install the missing ones.
# Sources are found by wildcard: a new src/<room>/*.c, tests/*/test_*.c or
# examples/*.c needs no edit here.

CUDA_HOME ?= $(if $(wildcard /usr/local/cuda/include/nvrtc.h),/usr/local/cuda,$(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)))
PREFIX ?= /usr/local
DESTDIR ?=
# Extra prefix holding headers and libraries unpacked from .deb files (the
# GPU machine has no apt): $(DEPS_PREFIX)/usr/include, .../usr/lib/x86_64-linux-gnu.
DEPS_PREFIX ?=
# SAN=1 builds everything with ASan+UBSan into build-san/; TSAN=1 with
# ThreadSanitizer into build-tsan/ (make test TSAN=1: the CPU suite under it).
SAN ?=
TSAN ?=
BUILD ?= $(if $(SAN),build-san,$(if $(TSAN),build-tsan,build))

# The release version, read from include/jitop.h (JITOP_VERSION_MAJOR,
# _MINOR, _PATCH), its one source of truth. SOVERSION is the ABI's, bumped
# by hand when the ABI breaks.
jitop_version_part = $(shell sed -n 's/^.define JITOP_VERSION_$(1)[ \t]*\([0-9][0-9]*\).*/\1/p' include/jitop.h)
VERSION := $(call jitop_version_part,MAJOR).$(call jitop_version_part,MINOR).$(call jitop_version_part,PATCH)
ifeq ($(shell echo '$(VERSION)' | grep -Ex '[0-9]+\.[0-9]+\.[0-9]+'),)
$(error cannot read JITOP_VERSION_MAJOR/MINOR/PATCH from include/jitop.h (got '$(VERSION)'))
endif
SOVERSION := 0

CC ?= cc
comma := ,
OPT ?= -O2
SAN_FLAGS := $(if $(SAN),-fsanitize=address$(comma)undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined) \
	$(if $(TSAN),-fsanitize=thread -fno-omit-frame-pointer)
DEPS_INC := $(if $(DEPS_PREFIX),-I$(DEPS_PREFIX)/usr/include -I$(DEPS_PREFIX)/usr/include/x86_64-linux-gnu)
DEPS_LIB := $(if $(DEPS_PREFIX),-L$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu -Wl$(comma)-rpath$(comma)$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu)

CPPFLAGS += -Iinclude -Isrc -I$(CUDA_HOME)/include $(DEPS_INC) -D_GNU_SOURCE \
	-DJITOP_SOURCE_KERNEL_DIR='"$(abspath kernels)"' \
	-DJITOP_INSTALL_KERNEL_DIR='"$(PREFIX)/share/jitop/kernels"' \
	-DJITOP_SOURCE_INCLUDE_DIR='"$(abspath include)"' \
	-DJITOP_INSTALL_INCLUDE_DIR='"$(PREFIX)/include"' \
	-DJITOP_CUDA_HOME='"$(CUDA_HOME)"'
CFLAGS += -std=c11 $(OPT) -g -Wall -Wextra -Werror -pthread $(SAN_FLAGS)
LIB_CFLAGS := -fPIC -fvisibility=hidden -DJITOP_BUILDING
# Full RELRO with immediate binding: the hardened link distributions use, and
# a warm load's first calls into libc then pay no lazy symbol lookup (10-25
# us of a 0.25 ms load + get in a new process on the GPU machine).
LDFLAGS += $(SAN_FLAGS) $(DEPS_LIB) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	-Wl,-z,relro,-z,now
LDLIBS += -ldl -lpthread -lm -lffi

LIB_SRC := $(sort $(wildcard src/*/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
CPU_TESTS := $(patsubst tests/cpu/%.c,$(BUILD)/tests/cpu/%,$(sort $(wildcard tests/cpu/test_*.c)))
GPU_TESTS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(sort $(wildcard tests/gpu/test_*.c)))
TEST_SUPPORT := $(sort $(wildcard tests/support/*.c))
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(sort $(wildcard examples/*.c)))
LLTM_EXT := $(BUILD)/examples/lltm_extension

STATIC := $(BUILD)/libjitop.a
SHARED := $(BUILD)/libjitop.so.$(VERSION)
CLI := $(BUILD)/jitop

.PHONY: all deps test test-gpu test-gpu-all valgrind stress fuzz fuzz-seeds demo bench install uninstall clean
all: $(STATIC) $(SHARED) $(CLI) $(EXAMPLES) $(LLTM_EXT)

# Checks (and on Debian as root installs) the build dependencies; valgrind
# too when `make valgrind` is asked for.
deps:
	@CUDA_HOME="$(CUDA_HOME)" DEPS_PREFIX="$(DEPS_PREFIX)" \
	  JITOP_WANT_VALGRIND=$(if $(filter valgrind,$(MAKECMDGOALS)),1,0) \
	  JITOP_WANT_NGINX=$(if $(filter test valgrind bench,$(MAKECMDGOALS)),1,0) scripts/install-deps.sh

# `make` alone only builds. These goals install what is missing first: deps
# is their prerequisite and an order-only prerequisite of every compile, so
# that with -j no compile starts before the install is done (it would not
# find xxhash.h on a fresh machine).
DEPS_GOALS := test test-gpu test-gpu-all valgrind demo bench install
DEPS_FIRST := $(if $(filter $(DEPS_GOALS),$(MAKECMDGOALS)),deps)

$(BUILD)/obj/src/%.o: src/%.c | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LIB_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(STATIC): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libjitop.so.$(SOVERSION) $(LDFLAGS) -o $@ $^ $(LDLIBS)
	ln -sf libjitop.so.$(VERSION) $(BUILD)/libjitop.so.$(SOVERSION)
	ln -sf libjitop.so.$(SOVERSION) $(BUILD)/libjitop.so

$(CLI): $(TOOL_OBJ) $(STATIC)
	$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(STATIC) $(LDLIBS)

# Examples are what a user writes: they link the driver (libcuda.so.1, through
# the toolkit's stub at link time) to allocate memory. They start only where a
# driver is installed; the library itself never links it.
$(BUILD)/examples/%: examples/%.c $(STATIC) | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC) $(LDLIBS) -L$(CUDA_HOME)/lib64/stubs -lcuda

$(BUILD)/tests/%: tests/%.c $(TEST_SUPPORT) $(STATIC) $(CLI) | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Itests/support $(CFLAGS) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT) $(STATIC) -lcmocka $(LDLIBS)

# The compatibility suite's two programs link its case table (tests/compat).
COMPAT_SRC := $(sort $(wildcard tests/compat/*.c))
$(BUILD)/tests/cpu/test_compat $(BUILD)/tests/gpu/test_compat: $(BUILD)/tests/%: tests/%.c \
		$(COMPAT_SRC) $(wildcard tests/compat/*.h) $(TEST_SUPPORT) $(STATIC) $(CLI)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Itests/support -Itests/compat $(CFLAGS) $(LDFLAGS) -o $@ $< $(COMPAT_SRC) \
	  $(TEST_SUPPORT) $(STATIC) -lcmocka $(LDLIBS)

# A fake CUDA driver (tests/fakecuda) that the tests/cpu/test_*_fake programs
# load instead of the real one, through LD_LIBRARY_PATH. Only for tests: not
# installed.
FAKE_CUDA := $(BUILD)/fakecuda/libcuda.so.1
$(FAKE_CUDA): tests/fakecuda/fake_libcuda.c tests/fakecuda/fake_libcuda.h src/load/driver.h | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -shared -Wl,-soname,libcuda.so.1 $(LDFLAGS) -o $@ $< -lpthread
$(filter %_fake,$(CPU_TESTS)): $(FAKE_CUDA)
$(BUILD)/tests/cpu/test_op_names: $(FAKE_CUDA)

# An LD_PRELOAD shim whose flock() fails as on NFS without a lock daemon;
# test_cache_safety runs the CLI under it. No sanitizers: it is preloaded
# into programs that may have none.
FLOCK_SHIM := $(BUILD)/tests/shim/libflock_fail.so
$(FLOCK_SHIM): tests/shim/flock_fail.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $<
$(BUILD)/tests/cpu/test_cache_safety: $(FLOCK_SHIM)

# The Python package (python/, docs/PYTHON.md). $(BUILD)/python/jitop is the
# package as it installs: the extension (python/src/*.c against PYTHON's
# headers, libjitop.a linked in) with the .py files and kernels beside it.
# `make test` runs its CPU suite (python/tests, pytest or the bundled
# runner) when PYTHON has its headers; test-python-gpu the GPU suite
# (python/tests/gpu, torch); `make python` installs it with pip, offline
# (no build isolation: the interpreter's own setuptools).
PY_GOALS := test test-python test-python-gpu bench-python
ifneq ($(filter $(PY_GOALS),$(MAKECMDGOALS)),)
# The CPU suite prefers an interpreter with pytest (Debian's python3-pytest
# serves /usr/bin/python3, not a python3 of pyenv or a venv found first);
# the GPU suite the python3 on PATH, the one with torch. Either way the
# bundled runner stands in for a missing pytest.
ifeq ($(origin PYTHON),undefined)
ifeq ($(filter test-python-gpu bench-python,$(MAKECMDGOALS)),)
PYTHON := $(shell python3 -c 'import pytest' 2>/dev/null && echo python3 || \
	{ /usr/bin/python3 -c 'import pytest' 2>/dev/null && echo /usr/bin/python3; } || echo python3)
endif
endif
endif
PYTHON ?= python3
ifneq ($(filter $(PY_GOALS),$(MAKECMDGOALS)),)
PY_CFG := $(shell $(PYTHON) -c 'import sys, sysconfig; print(sysconfig.get_paths()["include"], sys.implementation.cache_tag)' 2>/dev/null)
endif
PY_INC := $(word 1,$(PY_CFG))
# One package per interpreter (cpython-311, cpython-312): an extension built
# for one does not import in another.
PY_PKG := $(BUILD)/python/$(or $(word 2,$(PY_CFG)),none)/jitop
PY_EXT := $(PY_PKG)/_jitop.so
PY_CSRC := $(sort $(wildcard python/src/*.c))
PY_FILES := $(sort $(wildcard python/jitop/*.py))
$(PY_EXT): $(PY_CSRC) $(wildcard python/src/*.h) $(PY_FILES) $(wildcard kernels/*) $(STATIC)
	@test -f "$(PY_INC)/Python.h" || { echo "no Python.h for $(PYTHON) (install python3-dev)"; exit 1; }
	@mkdir -p $(@D)/kernels
	$(CC) -Iinclude -I$(PY_INC) -D_GNU_SOURCE $(CFLAGS) -fPIC -fvisibility=hidden -shared \
	  $(LDFLAGS) -o $@ $(PY_CSRC) $(STATIC) $(LDLIBS)
	cp $(PY_FILES) $(@D)/
	cp -R kernels/. $(@D)/kernels/
# Folded into `make test` only where the interpreter has its headers; not
# under TSAN (an uninstrumented interpreter gives it nothing to check).
PY_ON := $(if $(TSAN),,$(if $(wildcard $(PY_INC)/Python.h),1))
PY_TEST_DEPS := $(if $(PY_ON),$(PY_EXT) $(FAKE_CUDA))
PY_TEST_RUN := $(if $(PY_ON),python/tests/run.sh)
export PYTHON
export JITOP_PY_PKG := $(abspath $(PY_PKG))
.PHONY: test-python test-python-gpu bench-python python python-ldlibs
test-python: deps $(PY_EXT) $(FAKE_CUDA) $(CLI)
	@JITOP_BUILD=$(abspath $(BUILD)) tests/run.sh python/tests/run.sh
test-python-gpu: deps $(PY_EXT)
	@JITOP_BUILD=$(abspath $(BUILD)) tests/run.sh python/tests/run-gpu.sh
# BENCH_ARGS: --quick, --parts launch,load,lltm (bench/python_bench.py).
bench-python: deps $(PY_EXT)
	PYTHONPATH=$(abspath $(dir $(PY_PKG))) $(PYTHON) bench/python_bench.py $(BENCH_ARGS)
python: $(STATIC)
	$(PYTHON) -m pip install --no-build-isolation ./python
# What python/setup.py links the extension with.
python-ldlibs:
	@echo $(DEPS_LIB) $(LDLIBS)

# Under TSAN=1 every report fails the program that made it (exit 66), the
# CLI's runs included; tests/tsan.supp lists the documented false positives.
TSAN_ENV := $(if $(TSAN),TSAN_OPTIONS="suppressions=$(abspath tests/tsan.supp) second_deadlock_stack=1 $$TSAN_OPTIONS")

# The CPU suite: real NVRTC, no GPU. Ends with "N passed, N failed". First
# the rooms check (scripts/check-rooms.sh: src/'s includes and calls go one
# way, bottom to top; under a second).
test: deps all $(CPU_TESTS) $(PY_TEST_DEPS)
	@scripts/check-rooms.sh $(BUILD)/obj/src
	@$(TSAN_ENV) JITOP_CLI=$(abspath $(CLI)) JITOP_BUILD=$(abspath $(BUILD)) tests/run.sh $(CPU_TESTS) \
	  $(PY_TEST_RUN)

# The GPU suite: skips (SKIP lines) where no driver is found. GPU_DEVICE=k
# runs it on device k alone (CUDA_VISIBLE_DEVICES=k: every test's device 0
# is that GPU, and test_multi_gpu, needing two, skips).
test-gpu: deps all $(GPU_TESTS)
	@$(if $(GPU_DEVICE),CUDA_VISIBLE_DEVICES=$(GPU_DEVICE)) JITOP_CLI=$(abspath $(CLI)) \
	  JITOP_BUILD=$(abspath $(BUILD)) tests/run.sh $(GPU_TESTS)

# The GPU suite once per device (GPU_COUNT: nvidia-smi's count unless given),
# then test_multi_gpu with every device visible. One summary line per run;
# fails when any run failed.
GPU_COUNT ?= $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
test-gpu-all: deps all $(GPU_TESTS)
	@[ "$(GPU_COUNT)" -ge 1 ] 2>/dev/null || { \
	  echo "test-gpu-all: no GPU listed by nvidia-smi -L; give GPU_COUNT=N" >&2; exit 1; }; \
	rc=0; k=0; while [ $$k -lt $(GPU_COUNT) ]; do \
	  echo "== the GPU suite on device $$k (CUDA_VISIBLE_DEVICES=$$k)"; \
	  CUDA_VISIBLE_DEVICES=$$k JITOP_CLI=$(abspath $(CLI)) JITOP_BUILD=$(abspath $(BUILD)) \
	    tests/run.sh $(GPU_TESTS) || rc=1; \
	  k=$$((k + 1)); \
	done; \
	echo "== test_multi_gpu on all $(GPU_COUNT) devices"; \
	JITOP_CLI=$(abspath $(CLI)) JITOP_BUILD=$(abspath $(BUILD)) \
	  tests/run.sh $(BUILD)/tests/gpu/test_multi_gpu || rc=1; \
	exit $$rc

# The CPU suite under valgrind (leaks and memory errors fail it).
valgrind: deps all $(CPU_TESTS)
	@JITOP_CLI=$(abspath $(CLI)) JITOP_BUILD=$(abspath $(BUILD)) \
	  JITOP_TEST_WRAPPER="valgrind -q --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --suppressions=tests/valgrind.supp" \
	  tests/run.sh $(CPU_TESTS)

# STRESS_PROCS processes build, gc and clean one cache for STRESS_SECONDS:
# every build must succeed and give the reference binary, and every file in
# the cache must be valid afterwards (tests/stress/stress.c).
STRESS_PROCS ?= 8
STRESS_SECONDS ?= 60
stress: all $(BUILD)/tests/stress/stress
	@$(BUILD)/tests/stress/stress $(STRESS_PROCS) $(STRESS_SECONDS)

# libFuzzer targets (tests/fuzz/fuzz_*.c): the library and each target built
# with clang -fsanitize=fuzzer,address,undefined into build-fuzz/, then each
# run for FUZZ_SECONDS from its seeds in tests/fuzz/corpus/<target>/ (what it
# learns goes to build-fuzz/corpus/<target>/, a crash to build-fuzz/crashes/).
# Fails when a target crashes, leaks or times out.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD := build-fuzz
FUZZ_FLAGS := -std=c11 -O1 -g -Wall -Wextra -Werror -pthread -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(sort $(wildcard tests/fuzz/fuzz_*.c)))

$(FUZZ_BUILD)/obj/src/%.o: src/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link,address,undefined $(LIB_CFLAGS) \
	  -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/libjitop.a: $(FUZZ_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_BUILD)/libjitop.a
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined \
	  $(DEPS_LIB) -o $@ $< $(FUZZ_BUILD)/libjitop.a $(LDLIBS)

fuzz: $(FUZZ_TARGETS)
	@tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_BUILD) $(FUZZ_TARGETS)

# Rewrites the seeds that jitop itself makes (entries, manifests, a cubin)
# into tests/fuzz/corpus/: after a format change, so that they parse again.
fuzz-seeds: all
	@mkdir -p $(BUILD)/tests/fuzz
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $(BUILD)/tests/fuzz/seeds tests/fuzz/seeds.c \
	  $(STATIC) $(LDLIBS)
	$(BUILD)/tests/fuzz/seeds tests/fuzz/corpus

# The main job: runs the quickstart on a GPU; prewarms the cache without one.
demo: deps all
	@scripts/demo.sh $(abspath $(BUILD))

# BENCH_ARGS: --quick (fewer repetitions) or --gpu-smoke (each part once).
bench: deps all
	@BUILD=$(abspath $(BUILD)) CUDA_HOME=$(CUDA_HOME) DEPS_PREFIX=$(DEPS_PREFIX) bench/run.sh $(BENCH_ARGS)

# The LLTM extension example (examples/lltm_extension): its host code and
# kernels/lltm.cu in one jitop_load, checked against a float64 reference.
$(LLTM_EXT): examples/lltm_extension/main.c $(STATIC) | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -DLLTM_EXT_DIR='"$(abspath examples/lltm_extension)"' \
	  -DLLTM_KERNEL_DIR='"$(abspath kernels)"' $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC) $(LDLIBS) \
	  -L$(CUDA_HOME)/lib64/stubs -lcuda
.PHONY: lltm-extension
lltm-extension: deps $(LLTM_EXT)
	$(LLTM_EXT)

install: deps all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/share/jitop/kernels
	install -m 644 include/jitop.h include/jitop_ops.h include/jitop_host.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libjitop.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libjitop.so.$(SOVERSION)
	ln -sf libjitop.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libjitop.so
	install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/
	cp -R kernels/. $(DESTDIR)$(PREFIX)/share/jitop/kernels/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@CUDA_HOME@|$(CUDA_HOME)|g' \
	  jitop.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/jitop.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/jitop.h $(DESTDIR)$(PREFIX)/include/jitop_ops.h $(DESTDIR)$(PREFIX)/include/jitop_host.h \
	  $(DESTDIR)$(PREFIX)/lib/libjitop.* $(DESTDIR)$(PREFIX)/bin/jitop \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/jitop.pc
	rm -rf $(DESTDIR)$(PREFIX)/share/jitop

clean:
	rm -rf build build-san build-tsan build-fuzz

-include $(shell find $(BUILD)/obj $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
