# jitop: `make` builds the libraries, the CLI and the examples; `make test`
# runs the CPU suite; `make test-gpu` the GPU suite; `make demo` the main job.
# Sources are found by wildcard: a new src/<room>/*.c, tests/*/test_*.c or
# examples/*.c needs no edit here.

CUDA_HOME ?= $(if $(wildcard /usr/local/cuda/include/nvrtc.h),/usr/local/cuda,$(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)))
PREFIX ?= /usr/local
DESTDIR ?=
# Extra prefix holding headers and libraries unpacked from .deb files (the
# GPU machine has no apt): $(DEPS_PREFIX)/usr/include, .../usr/lib/x86_64-linux-gnu.
DEPS_PREFIX ?=
# SAN=1 builds everything with ASan+UBSan into build-san/.
SAN ?=
BUILD ?= $(if $(SAN),build-san,build)

VERSION := 0.1.0
SOVERSION := 0

CC ?= cc
comma := ,
OPT ?= -O2
SAN_FLAGS := $(if $(SAN),-fsanitize=address$(comma)undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
DEPS_INC := $(if $(DEPS_PREFIX),-I$(DEPS_PREFIX)/usr/include)
DEPS_LIB := $(if $(DEPS_PREFIX),-L$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu -Wl$(comma)-rpath$(comma)$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu)

CPPFLAGS += -Iinclude -Isrc -I$(CUDA_HOME)/include $(DEPS_INC) -D_GNU_SOURCE \
	-DJITOP_SOURCE_KERNEL_DIR='"$(abspath kernels)"' \
	-DJITOP_INSTALL_KERNEL_DIR='"$(PREFIX)/share/jitop/kernels"' \
	-DJITOP_CUDA_HOME='"$(CUDA_HOME)"'
CFLAGS += -std=c11 $(OPT) -g -Wall -Wextra -Werror -pthread $(SAN_FLAGS)
LIB_CFLAGS := -fPIC -fvisibility=hidden -DJITOP_BUILDING
# Full RELRO with immediate binding: the hardened link distributions use, and
# a warm load's first calls into libc then pay no lazy symbol lookup (10-25
# us of a 0.25 ms load + get in a new process on the GPU machine).
LDFLAGS += $(SAN_FLAGS) $(DEPS_LIB) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	-Wl,-z,relro,-z,now
LDLIBS += -ldl -lpthread -lm

LIB_SRC := $(sort $(wildcard src/*/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
CPU_TESTS := $(patsubst tests/cpu/%.c,$(BUILD)/tests/cpu/%,$(sort $(wildcard tests/cpu/test_*.c)))
GPU_TESTS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(sort $(wildcard tests/gpu/test_*.c)))
TEST_SUPPORT := $(sort $(wildcard tests/support/*.c))
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(sort $(wildcard examples/*.c)))

STATIC := $(BUILD)/libjitop.a
SHARED := $(BUILD)/libjitop.so.$(VERSION)
CLI := $(BUILD)/jitop

.PHONY: all deps test test-gpu valgrind demo bench install uninstall clean
all: deps $(STATIC) $(SHARED) $(CLI) $(EXAMPLES)

# Checks (and on Debian as root installs) the build dependencies.
deps:
	@CUDA_HOME="$(CUDA_HOME)" DEPS_PREFIX="$(DEPS_PREFIX)" scripts/install-deps.sh

$(BUILD)/obj/src/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LIB_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c
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
$(BUILD)/examples/%: examples/%.c $(STATIC)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC) $(LDLIBS) -L$(CUDA_HOME)/lib64/stubs -lcuda

$(BUILD)/tests/%: tests/%.c $(TEST_SUPPORT) $(STATIC) $(CLI)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Itests/support $(CFLAGS) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT) $(STATIC) -lcmocka $(LDLIBS)

# A fake CUDA driver (tests/fakecuda) that test_loader_fake loads instead of
# the real one, through LD_LIBRARY_PATH. Only for tests: not installed.
FAKE_CUDA := $(BUILD)/fakecuda/libcuda.so.1
$(FAKE_CUDA): tests/fakecuda/fake_libcuda.c tests/fakecuda/fake_libcuda.h src/load/driver.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -shared -Wl,-soname,libcuda.so.1 $(LDFLAGS) -o $@ $< -lpthread
$(BUILD)/tests/cpu/test_loader_fake: $(FAKE_CUDA)
$(BUILD)/tests/cpu/test_op_names: $(FAKE_CUDA)

# The CPU suite: real NVRTC, no GPU. Ends with "N passed, N failed".
test: all $(CPU_TESTS)
	@JITOP_CLI=$(abspath $(CLI)) JITOP_BUILD=$(abspath $(BUILD)) tests/run.sh $(CPU_TESTS)

# The GPU suite: skips (SKIP lines) where no driver is found.
test-gpu: all $(GPU_TESTS)
	@JITOP_CLI=$(abspath $(CLI)) JITOP_BUILD=$(abspath $(BUILD)) tests/run.sh $(GPU_TESTS)

# The CPU suite under valgrind (leaks and memory errors fail it).
valgrind: all $(CPU_TESTS)
	@JITOP_CLI=$(abspath $(CLI)) JITOP_BUILD=$(abspath $(BUILD)) \
	  JITOP_TEST_WRAPPER="valgrind -q --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --suppressions=tests/valgrind.supp" \
	  tests/run.sh $(CPU_TESTS)

# The main job: runs the quickstart on a GPU; prewarms the cache without one.
demo: all
	@scripts/demo.sh $(abspath $(BUILD))

# BENCH_ARGS: --quick (fewer repetitions) or --gpu-smoke (each part once).
bench: all
	@BUILD=$(abspath $(BUILD)) CUDA_HOME=$(CUDA_HOME) DEPS_PREFIX=$(DEPS_PREFIX) bench/run.sh $(BENCH_ARGS)

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/share/jitop/kernels
	install -m 644 include/jitop.h include/jitop_ops.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libjitop.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libjitop.so.$(SOVERSION)
	ln -sf libjitop.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libjitop.so
	install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/
	cp -R kernels/. $(DESTDIR)$(PREFIX)/share/jitop/kernels/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@CUDA_HOME@|$(CUDA_HOME)|g' \
	  jitop.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/jitop.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/jitop.h $(DESTDIR)$(PREFIX)/include/jitop_ops.h \
	  $(DESTDIR)$(PREFIX)/lib/libjitop.* $(DESTDIR)$(PREFIX)/bin/jitop \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/jitop.pc
	rm -rf $(DESTDIR)$(PREFIX)/share/jitop

clean:
	rm -rf build build-san

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
