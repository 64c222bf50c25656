#!/bin/sh
# Build the libFuzzer targets into build-fuzz/, replay their checked-in
# corpora, then fuzz each for a short fixed time; fail on any crash, leak,
# UBSan report or failed check.  `make fuzz` runs this.
#
#   FUZZ_TIME=20   seconds of fuzzing per target (0: replay only)
#   FUZZ_CC=clang  the compiler (needs libFuzzer: libclang-rt-*-dev)
#   FUZZ_TARGETS="dns agent_proto"   replay and fuzz only these (all are built)
#
# New inputs found while fuzzing go to build-fuzz/corpus/<target>/, not into
# the tree; a crash leaves build-fuzz/crash-* to reproduce with
#   build-fuzz/fuzz_<target> build-fuzz/crash-...
set -eu

cd "$(dirname "$0")/../.."
out=build-fuzz
time_s=${FUZZ_TIME:-20}
cc=${FUZZ_CC:-clang}

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz: $cc not found (apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
fi

mkdir -p "$out/corpus/spec" "$out/corpus/router" "$out/corpus/image" "$out/corpus/journal" \
    "$out/corpus/path" "$out/corpus/netpolicy" "$out/corpus/dns" "$out/corpus/nflog" \
    "$out/corpus/agent_proto" "$out/corpus/code_answer"
cflags="-std=gnu11 -g -O1 -D_GNU_SOURCE -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
    -Wno-unused-parameter"

echo "fuzz: building $out/fuzz_spec, $out/fuzz_router, $out/fuzz_image, $out/fuzz_journal," \
    "$out/fuzz_path, $out/fuzz_netpolicy, $out/fuzz_dns, $out/fuzz_nflog, $out/fuzz_agent_proto" \
    "and $out/fuzz_code_answer"
# shellcheck disable=SC2046,SC2086  # word splitting of flags is intended
$cc $cflags $(pkg-config --cflags jansson libcrypto) -o "$out/fuzz_spec" tests/fuzz/fuzz_spec.c \
    lib/core/spec.c lib/core/netpolicy.c lib/core/services.c lib/util/*.c $(pkg-config --libs jansson libcrypto)
# shellcheck disable=SC2086
$cc $cflags -o "$out/fuzz_router" tests/fuzz/fuzz_router.c lib/api/router.c
# the image reader and layer applier (it runs mkfs.erofs for inputs it accepts)
# shellcheck disable=SC2046,SC2086
$cc $cflags $(pkg-config --cflags jansson libarchive libcrypto) -o "$out/fuzz_image" \
    tests/fuzz/fuzz_image.c lib/image/*.c lib/helper/apply.c lib/util/*.c \
    $(pkg-config --libs jansson libarchive libcrypto)
# the trajectory log: reader and open-for-append (recovery) on any file
# shellcheck disable=SC2046,SC2086
$cc $cflags $(pkg-config --cflags jansson zlib libcrypto) -o "$out/fuzz_journal" \
    tests/fuzz/fuzz_journal.c lib/traj/journal.c lib/util/*.c $(pkg-config --libs jansson zlib libcrypto)
# the path normaliser every path checker is a call of
# shellcheck disable=SC2086
$cc $cflags -o "$out/fuzz_path" tests/fuzz/fuzz_path.c lib/util/path.c lib/util/buf.c \
    lib/util/err.c
# a sandbox's network policy: the network object, one rule, the matchers
# shellcheck disable=SC2046,SC2086
$cc $cflags $(pkg-config --cflags jansson libcrypto) -o "$out/fuzz_netpolicy" \
    tests/fuzz/fuzz_netpolicy.c lib/core/netpolicy.c lib/core/spec.c lib/core/services.c lib/util/*.c \
    $(pkg-config --libs jansson libcrypto)
# the resolver's packets: a sandbox's queries and an upstream's answers
# shellcheck disable=SC2046,SC2086
$cc $cflags $(pkg-config --cflags ldns) -o "$out/fuzz_dns" tests/fuzz/fuzz_dns.c lib/core/dns.c \
    lib/util/err.c $(pkg-config --libs ldns)
# the start of a packet a sandbox's chain dropped, as the kernel reports it
# shellcheck disable=SC2046,SC2086
$cc $cflags -o "$out/fuzz_nflog" tests/fuzz/fuzz_nflog.c lib/os/nflog.c lib/util/err.c \
    lib/util/fdio.c $(pkg-config --libs libnetfilter_log)
# the agent protocol: a hostile guest's frames on the host's decoder and its
# session (and the host's on the guest's decoder), and every JSON message's parser
# shellcheck disable=SC2046,SC2086
$cc $cflags $(pkg-config --cflags jansson) -o "$out/fuzz_agent_proto" tests/fuzz/fuzz_agent_proto.c \
    lib/agent/proto.c lib/agent/msg.c lib/agent/host.c lib/util/err.c lib/util/buf.c \
    $(pkg-config --libs jansson)
# a code context's kernel's lines: what a sandbox's python answers
# shellcheck disable=SC2046,SC2086
$cc $cflags $(pkg-config --cflags jansson) -o "$out/fuzz_code_answer" tests/fuzz/fuzz_code_answer.c \
    lib/core/code_answer.c $(pkg-config --libs jansson)

status=0
# shellcheck disable=SC2086  # a list of names
for t in ${FUZZ_TARGETS:-spec router image journal path netpolicy dns nflog agent_proto code_answer}; do
    bin=$out/fuzz_$t
    corpus=tests/fuzz/corpus/$t
    dict=tests/fuzz/$t.dict
    echo "fuzz: $t: replaying $(ls "$corpus" | wc -l) corpus inputs"
    if ! "$bin" -runs=0 "$corpus" >"$out/$t-replay.log" 2>&1; then
        cat "$out/$t-replay.log"
        echo "fuzz: $t: FAILED on the checked-in corpus" >&2
        status=1
        continue
    fi
    [ "$time_s" -gt 0 ] || continue
    echo "fuzz: $t: fuzzing for ${time_s}s"
    max_len=8192
    [ "$t" = image ] && max_len=65536 # its seeds are archives of up to 16 KiB
    if ! "$bin" -max_total_time="$time_s" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
        -dict="$dict" -artifact_prefix="$out/" -print_final_stats=1 \
        "$out/corpus/$t" "$corpus" >"$out/$t-fuzz.log" 2>&1; then
        tail -n 60 "$out/$t-fuzz.log"
        echo "fuzz: $t: FAILED (reproducer: $(ls -t "$out"/crash-* "$out"/leak-* "$out"/timeout-* \
            "$out"/oom-* 2>/dev/null | head -n 1))" >&2
        status=1
        continue
    fi
    grep -E '^stat::(number_of_executed_units|new_units_added)' "$out/$t-fuzz.log" |
        sed "s/^/fuzz: $t: /"
done
[ "$status" -eq 0 ] && echo "fuzz: ok"
exit "$status"
