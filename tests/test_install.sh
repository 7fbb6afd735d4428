#!/bin/sh
# cmake --install of the build tree into a temporary prefix, then examples/cpp (a project of its own)
# configured with find_package(manyadd), built and run: on the constructed model and on a committed
# learned model, on bad input (exit 2), and the installed tools' --version.
# Usage: test_install.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
test -f "$tmp/prefix/lib/cmake/manyadd/manyaddConfig.cmake"
test -x "$tmp/prefix/bin/manyadd-verify_construction"
"$tmp/prefix/bin/manyadd-evaluate" --version | grep -q '^evaluate 0\.1\.0 (commit '
cmake -S "$src/examples/cpp" -B "$tmp/example" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log"
cmake --build "$tmp/example" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
out=$("$tmp/example/add_with_both" 57+48+96 "$src/models/cpu-sa1010-1l4h-d64")
echo "$out"
echo "$out" | grep -q '^constructed  000>750>501>102\$  (exact'
echo "$out" | grep -q '^certificate  PROVEN'
echo "$out" | grep -q '^learned      .*(exact; greedy)'
rc=0; "$tmp/example/add_with_both" 5x7 2> "$tmp/err" || rc=$?
test "$rc" = 2 && grep -q "add_with_both:" "$tmp/err"
rc=0; "$tmp/example/add_with_both" 5+7 "$tmp/no-such-model" 2> "$tmp/err" || rc=$?
test "$rc" = 2
echo "test_install: passed"
