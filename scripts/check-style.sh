#!/bin/sh
# Style gates that need no judgement: banned functions, and a clang-format
# check of the C sources against .clang-format.
set -eu
cd "$(dirname "$0")/.."
fail=0
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find lib src tests -name '*.[ch]')
# Banned: unbounded or hidden-state libc calls (style.md).
banned='\b(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|gets|system)[[:space:]]*\('
if grep -nE "$banned" $files | grep -v 'style: allow'; then
    echo "check-style: banned function above (use snprintf, strtol, ...)"
    fail=1
fi
if command -v clang-format >/dev/null 2>&1; then
    bad=""
    for f in $files; do
        clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad="$bad $f"
    done
    if [ -n "$bad" ]; then
        echo "check-style: not clang-formatted:$bad"
        echo "  fix with: clang-format -i$bad"
        fail=1
    fi
fi
[ "$fail" = 0 ] && echo "check-style: ok"
exit "$fail"
