# Corral: `make` builds everything into build/; `make check` installs what it
# needs, builds and runs every test; `make demo` shows it working.
# SAN=1 builds into build-san/ with AddressSanitizer and UBSan.

CC ?= gcc
SAN ?= 0
# V=1 shows every command
ifeq ($(V),1)
Q :=
else
Q := @
endif
ifeq ($(SAN),1)
B := build-san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT := -O1
else
B := build
SANFLAGS :=
OPT := -O2
endif

PKGS := libmicrohttpd jansson libseccomp libarchive libcurl libcrypto zlib libzstd \
        libnl-route-3.0 libnftables ldns libnetfilter_log
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wformat=2 -Wshadow -Wpointer-arith -Wcast-align \
        -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wno-unused-parameter -Wno-format-truncation \
        -Werror=implicit-function-declaration -Werror=return-type
CFLAGS += -std=gnu11 $(OPT) -g $(WARN) -D_GNU_SOURCE -fstack-protector-strong \
          -fno-strict-aliasing $(SANFLAGS) $(PKG_CFLAGS) -MMD -MP
LDFLAGS += $(SANFLAGS)
LDLIBS += $(PKG_LIBS) -lm

LIB_SRC := $(wildcard lib/util/*.c lib/agent/*.c lib/os/*.c lib/vmm/*.c lib/helper/*.c lib/core/*.c lib/image/*.c \
                      lib/functions/*.c lib/api/*.c lib/client/*.c lib/traj/*.c lib/cluster/*.c \
                      lib/backend/*/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(B)/obj/%.o)
LIB := $(B)/libcorral.a

CORRALD_SRC := $(wildcard src/corrald/*.c)
# corral-init is freestanding (no libc): built by its own rule below.
CORRAL_SRC := $(wildcard src/corral/*.c)
# corral-bench shares the CLI's flag parsing and error reporting (cli.c).
BENCH_SRC := $(wildcard src/corral-bench/*.c) src/corral/cli.c
SPAWNER_SRC := $(wildcard src/corral-spawner/*.c)
IMPORT_SRC := $(wildcard src/corral-import/*.c)
ZYGOTE_SRC := $(wildcard src/corral-zygote/*.c)
UNPACK_SRC := $(wildcard src/corral-unpack/*.c)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)

BINS := $(B)/corrald $(B)/corral $(B)/corral-bench $(B)/corral-spawner $(B)/corral-import $(B)/corral-zygote \
        $(B)/corral-unpack \
        $(B)/corral-init $(B)/corral-probe $(B)/corral-agent

.PHONY: all clean check check-unit check-integration check-san check-style deps images \
        demo bench leakcheck fuzz microvm-kernel microvm-initramfs microvm-bench microvm-agent \
        microvm-guest
all: $(BINS) $(UNIT_BIN)

# A code context's kernel (lib/core/code_kernel.py), as a C string.
$(B)/gen/code_kernel.inc: lib/core/code_kernel.py
	@mkdir -p $(dir $@)
	$(Q)sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@
$(B)/obj/lib/core/code.o: $(B)/gen/code_kernel.inc
$(B)/obj/lib/core/code.o: CFLAGS += -I$(B)/gen

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJ)
	@rm -f $@
	@$(if $(Q),echo "  AR      $@")
	$(Q)ar rcs $@ $^

$(B)/corrald: $(CORRALD_SRC:%.c=$(B)/obj/%.o) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(B)/corral: $(CORRAL_SRC:%.c=$(B)/obj/%.o) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread -lm
$(B)/corral-bench: $(BENCH_SRC:%.c=$(B)/obj/%.o) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread -lm
$(B)/corral-spawner: $(SPAWNER_SRC:%.c=$(B)/obj/%.o) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(B)/corral-import: $(IMPORT_SRC:%.c=$(B)/obj/%.o) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(B)/corral-unpack: $(UNPACK_SRC:%.c=$(B)/obj/%.o) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
# The function backend's zygote embeds the Python interpreter.
$(B)/obj/src/corral-zygote/%.o: CFLAGS += $(shell pkg-config --cflags python3-embed)
$(B)/corral-zygote: $(ZYGOTE_SRC:%.c=$(B)/obj/%.o) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(shell pkg-config --libs python3-embed)

# The probe runs inside sandboxes, which may have no libc: always static,
# never sanitized.
$(B)/corral-probe: tests/probe/probe.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@ (static)")
	$(Q)$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -static -o $@ $<

# A sandbox's PID 1 after its root is built: freestanding and tiny, so a
# sandbox's init owns a few pages of its own.  Never sanitized.
$(B)/corral-init: src/corral-init/main.c lib/util/rawsys.h lib/backend/container/spawn_proto.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@ (static, freestanding)")
	$(Q)$(CC) -std=gnu11 -Os -Wall -Wextra -Werror -D_GNU_SOURCE -static -nostdlib \
	    -fno-stack-protector -fno-asynchronous-unwind-tables -fno-builtin -o $@ $<

# A microVM guest's PID 1 (issue 13): static, and linked from lib/agent and
# the libc-only parts of lib/util and lib/guest, never from libcorral.a (its
# daemon's libraries have no place in a guest).  jansson from libjansson.a.
AGENT_SRC := $(wildcard src/corral-agent/*.c) lib/agent/proto.c lib/agent/msg.c lib/util/err.c \
             lib/util/buf.c lib/util/fdio.c lib/util/log.c lib/util/path.c lib/guest/boot.c \
             lib/helper/tar.c lib/helper/apply.c lib/helper/file_in.c lib/helper/fsop.c
# libarchive and what its tar and filters need, static (archive_shim.c says
# why the rest of its formats stay out).
AGENT_LIBS := -l:libjansson.a -l:libarchive.a -l:libnettle.a -l:libacl.a -l:liblzma.a \
              -l:libzstd.a -l:liblz4.a -l:libbz2.a -l:libz.a
# The sanitizer build links it dynamically (ASan has no static runtime) for
# the tests that run it on the host; guests get the plain build's.
AGENT_STATIC := $(if $(filter 1,$(SAN)),,-static)
$(B)/corral-agent: $(AGENT_SRC:%.c=$(B)/obj/%.o)
	@$(if $(Q),echo "  LD      $@ $(AGENT_STATIC)")
	$(Q)$(CC) $(LDFLAGS) $(AGENT_STATIC) -o $@ $^ $(if $(AGENT_STATIC),$(AGENT_LIBS),-ljansson -larchive)

# The microvm groundwork (issue 13): Debian's cloud kernel and its modules,
# cached outside the tree; a boot probe as a test guest's /init (static,
# never sanitized); the initramfs Corral builds around it.
MICROVM_CACHE ?= $(HOME)/.cache/corral/microvm
$(B)/microvm-boot-probe: tests/microvm/boot_probe.c lib/guest/boot.c lib/guest/boot.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@ (static)")
	$(Q)$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -static -o $@ $(filter %.c,$^)

# Exit 2 from the script: apt cannot fetch the kernel (no mirror).  That is
# not a build failure: the microvm tests skip and say so.
microvm-kernel:
	@mkdir -p $(B)
	@rc=0; scripts/microvm-kernel.sh --cache $(MICROVM_CACHE) >$(B)/microvm-kernel.dir.tmp || rc=$$?; \
	if [ $$rc = 0 ]; then mv $(B)/microvm-kernel.dir.tmp $(B)/microvm-kernel.dir; \
	    echo "microvm-kernel: $$(cat $(B)/microvm-kernel.dir)"; \
	elif [ $$rc = 2 ]; then rm -f $(B)/microvm-kernel.dir.tmp; \
	    echo "microvm-kernel: apt cannot fetch the kernel: the microvm tests will skip"; \
	else rm -f $(B)/microvm-kernel.dir.tmp; exit $$rc; fi

microvm-initramfs: microvm-kernel $(B)/microvm-boot-probe
	scripts/microvm-initramfs.sh --kernel-dir "$$(cat $(B)/microvm-kernel.dir)" \
	    --init $(B)/microvm-boot-probe --out $(B)/microvm-probe.cpio

# corral-agent as the guest's /init: boot to READY over a busybox EROFS
# layer, EXEC round trips, N=MICROVM_N times.
microvm-agent: microvm-kernel $(B)/corral-agent
	scripts/microvm-initramfs.sh --kernel-dir "$$(cat $(B)/microvm-kernel.dir)" \
	    --init $(B)/corral-agent --out $(B)/microvm-agent.cpio
	scripts/microvm-boot.py --kernel-dir "$$(cat $(B)/microvm-kernel.dir)" \
	    --initrd $(B)/microvm-agent.cpio --mode agent --iterations $(MICROVM_N)

# A guest /init that breaks the agent protocol on purpose, for the tests.
$(B)/microvm-hostile-agent: tests/microvm/hostile_agent.c lib/guest/boot.c lib/agent/proto.c \
                            lib/util/err.c lib/guest/boot.h lib/agent/proto.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@ (static)")
	$(Q)$(CC) -std=gnu11 -O2 $(WARN) -D_GNU_SOURCE -static -o $@ $(filter %.c,$^)

# What corrald's microvm backend boots (--microvm-kernel, --microvm-initrd):
# the cached kernel and an initramfs around corral-agent, in $(B)/microvm,
# made by `corral setup microvm` (scripts/microvm-guest.sh) as a user's
# set-up makes them in <state>/microvm.  Without a kernel (no mirror) there
# is nothing to build, and the microvm tests skip, saying so.
microvm-guest: microvm-kernel $(B)/corral $(B)/corral-agent $(B)/microvm-hostile-agent
	@if [ -f $(B)/microvm-kernel.dir ]; then \
	    $(B)/corral setup microvm --out $(B)/microvm --cache $(MICROVM_CACHE) && \
	    scripts/microvm-initramfs.sh --kernel-dir "$$(cat $(B)/microvm-kernel.dir)" \
	        --init $(B)/microvm-hostile-agent --out $(B)/microvm/hostile.cpio; fi

# Boot, save, restore and shared-RAM restore, N=MICROVM_N times each.
MICROVM_N ?= 5
microvm-bench: microvm-initramfs
	scripts/microvm-boot.py --kernel-dir "$$(cat $(B)/microvm-kernel.dir)" \
	    --initrd $(B)/microvm-probe.cpio --mode all --iterations $(MICROVM_N) --rss-wait 2

$(B)/tests/test_%: tests/unit/test_%.c tests/unit/tap.h $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC+LD   $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)
# test_agent drives the agent binary over a socketpair.
$(B)/tests/test_agent: $(B)/corral-agent
# The checkpoint store's tests share a header of helpers.
$(filter $(B)/tests/test_ckpt_%,$(UNIT_BIN)): tests/unit/ckpt_fixture.h

deps:
	scripts/install-deps.sh

# The `debian` image (minbase + python3), in the store the tests and the demo
# read with --images-from; debootstrap's output is cached in ~/.cache/corral.
# `debian-vm` is the vm backend's (systemd, the modules of the guest
# kernel microvm-guest fetched, busybox for the tools the network tests
# speak): made only when that kernel is there.
images: $(BINS)
	@if [ -f build/images/tags/debian:latest ]; then echo "image debian: in build/images"; \
	else $(B)/corral image build-debian debian --packages python3 --store build/images; fi
	@if [ -f build/images/tags/debian-vm:latest ]; then echo "image debian-vm: in build/images"; \
	elif [ ! -f $(B)/microvm/kernel.manifest ]; then \
	    echo "image debian-vm: skipped: no guest kernel was fetched ($(B)/microvm/kernel.manifest; make microvm-guest)"; \
	else $(B)/corral image build-vm debian-vm --packages python3,busybox --store build/images \
	    --kernel-manifest $(B)/microvm/kernel.manifest; fi

check-unit: $(UNIT_BIN)
	tests/run-unit.sh $(B)

check-integration: $(BINS)
	tests/run-integration.sh $(B)

check-style:
	scripts/check-style.sh

# LEAKS_BEFORE: what `make check` found before it ran (not its leaks).
leakcheck:
	tests/leakcheck.sh $(if $(LEAKS_BEFORE),--since $(LEAKS_BEFORE))

check: deps
	mkdir -p $(B)
	tests/leakcheck.sh --save $(B)/leaks-before
	$(MAKE) all
	$(MAKE) check-style
	$(MAKE) microvm-guest
	$(MAKE) images
	$(MAKE) check-unit
	$(MAKE) check-integration
	$(MAKE) leakcheck LEAKS_BEFORE=$(B)/leaks-before
	$(MAKE) SAN=1 all
	$(MAKE) SAN=1 check-unit
	$(MAKE) SAN=1 check-integration
	$(MAKE) leakcheck LEAKS_BEFORE=$(B)/leaks-before
	$(MAKE) fuzz

demo: deps
	$(MAKE) all
	$(MAKE) microvm-guest
	scripts/demo.sh

bench: $(BINS)
	$(B)/corral bench --start-daemon

fuzz:
	tests/fuzz/run.sh

clean:
	rm -rf build build-san

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
