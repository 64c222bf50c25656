#!/bin/sh
# Run every C unit test program in BUILD_DIR/tests (test_*), print its TAP,
# and fail if any failed.  Exit status 77 means skipped: the program's
# "1..0 # SKIP why" line says why.  TODO tests are known bugs: listed, not
# failures.  A program is failed if it exits non-zero (not 77), prints no
# plan, or prints a "not ok" that is not TODO.
#
#   tests/run-unit.sh build            # or build-san; make check-unit runs it
#   tests/run-unit.sh build test_spec  # only some programs
#
# CRL_TEST_TIMEOUT_MULTIPLIER stretches every per-case timeout (3 by default
# for a sanitizer build directory); a whole program gets 300 s times that.
set -u

bdir=${1:?usage: tests/run-unit.sh BUILD_DIR [test_name...]}
shift
case $bdir in
*san*) : "${CRL_TEST_TIMEOUT_MULTIPLIER:=3}" ;;
*) : "${CRL_TEST_TIMEOUT_MULTIPLIER:=1}" ;;
esac
export CRL_TEST_TIMEOUT_MULTIPLIER

if [ $# -gt 0 ]; then
    progs=
    for t in "$@"; do progs="$progs $bdir/tests/${t#"$bdir"/tests/}"; done
else
    progs=$(find "$bdir/tests" -maxdepth 1 -name 'test_*' -type f -perm -u+x 2>/dev/null | sort)
fi
if [ -z "$progs" ]; then
    echo "run-unit: no test programs in $bdir/tests (build them with make)" >&2
    exit 1
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT INT TERM
passed= failed= skipped= todo=0

for p in $progs; do
    name=${p##*/}
    echo "=== $name"
    start=$(date +%s)
    if [ -x "$p" ]; then
        timeout -k 5 $((300 * CRL_TEST_TIMEOUT_MULTIPLIER)) "$p" >"$out" 2>&1
        rc=$?
    else
        echo "run-unit: $p is not an executable" >"$out"
        rc=127
    fi
    cat "$out"
    secs=$(($(date +%s) - start))
    n_todo=$(grep -c '^not ok .*# TODO' "$out")
    todo=$((todo + n_todo))
    bad=$(grep '^not ok' "$out" | grep -vc '# TODO')
    if [ "$rc" -eq 77 ]; then
        why=$(sed -n 's/^1\.\.0 # SKIP //p' "$out" | head -n 1)
        echo "--- $name: SKIPPED: ${why:-no reason given}"
        skipped="$skipped $name"
    elif [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] && grep -q '^1\.\.[1-9]' "$out"; then
        note=
        [ "$n_todo" -gt 0 ] && note=", $n_todo known bug(s) marked TODO"
        echo "--- $name: ok (${secs}s$note)"
        passed="$passed $name"
    else
        case $rc in
        0) why="exit 0 but $bad failed test(s) or no plan" ;;
        124 | 137) why="timed out" ;;
        *) why="exit status $rc" ;;
        esac
        echo "--- $name: FAILED ($why)"
        failed="$failed $name"
    fi
done

count() { set -- $1; echo $#; }
echo
echo "unit tests: $(count "$passed") passed, $(count "$skipped") skipped, $(count "$failed") failed; $todo known bug(s) marked TODO"
[ -n "$skipped" ] && echo "skipped:$skipped"
if [ -n "$failed" ]; then
    echo "FAILED:$failed"
    exit 1
fi
exit 0
