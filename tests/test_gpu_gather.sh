#!/bin/sh
# bench/gpu/gather.sh packs a bundle a bare CUDA image can run: every binary the GPU plans name
# ($G/bin/NAME in bench/results/*/PLAN.md and GPU-NEXT.md) is in it, and every library they load
# resolves from the bundle's lib/ (or is cuBLAS / the C runtime); bench/gpu/pre.sh unpacks it and
# refuses (3) without a bundle; gather refuses (2) without a build.   test_gpu_gather.sh SOURCE BUILD
set -eu
src="$1"; build="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

XZ_OPT="-0 -T2" bash "$src/bench/gpu/gather.sh" "$build" "$tmp/co/.gpu" > "$tmp/gather.log" 2>&1 \
  || { cat "$tmp/gather.log"; fail "gather.sh exited $?"; }
mkdir -p "$tmp/u" && tar -C "$tmp/u" -xJf "$tmp/co/.gpu/bundle.tar.xz"
for b in "$tmp"/u/bin/*; do
  missing="$(LD_LIBRARY_PATH="$tmp/u/lib" ldd "$b" | grep 'not found' || true)"
  [ -z "$missing" ] || fail "$(basename "$b"): $missing"
  # Outside the C runtime and cuBLAS, every library must come from the bundle (a bare image has no fmt, z3, ...).
  outside="$(LD_LIBRARY_PATH="$tmp/u/lib" ldd "$b" | awk '/=> \//{print $3}' \
    | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so|libcublas|libcudart|libcuda\.' \
    | grep -v "^$tmp/u/lib/" || true)"
  [ -z "$outside" ] || fail "$(basename "$b") loads from outside the bundle: $outside"
done
named="$(cat "$src"/bench/results/*/PLAN.md "$src"/bench/results/GPU-NEXT.md "$src"/bench/gpu/lease.sh | grep -oE '\$G/bin/[a-z0-9_]+' | sort -u | sed 's|\$G/bin/||')"
[ -n "$named" ] || fail "no \$G/bin/NAME in the plans (the pattern is out of date)"
for n in $named; do [ -x "$tmp/u/bin/$n" ] || fail "the plans run \$G/bin/$n, which the bundle lacks"; done

# pre.sh in a checkout copy: unpacks, exports, and the tools run.
mkdir -p "$tmp/co/bench/gpu" && cp "$src/bench/gpu/pre.sh" "$tmp/co/bench/gpu/"
out="$(cd "$tmp" && MANYADD_GPU_DIR="$tmp/g1" bash -c ". '$tmp/co/bench/gpu/pre.sh' && \"\$G\"/bin/train --version && echo \"src=\$MANYADD_SOURCE_DIR\"")" \
  || fail "pre.sh or train --version failed: $out"
echo "$out" | grep -q "src=$tmp/co" || fail "MANYADD_SOURCE_DIR is not the checkout: $out"
rm -rf "$tmp/co/.gpu"
if (cd "$tmp" && MANYADD_GPU_DIR="$tmp/g2" bash -c ". '$tmp/co/bench/gpu/pre.sh'") > "$tmp/pre.log" 2>&1; then fail "pre.sh without a bundle succeeded"; fi
grep -q "no .gpu/bundle.tar.xz" "$tmp/pre.log" || fail "pre.sh without a bundle: $(cat "$tmp/pre.log")"
set +e; bash "$src/bench/gpu/gather.sh" "$tmp/no-build" "$tmp/x" > "$tmp/g2.log" 2>&1; rc=$?; set -e
[ "$rc" -eq 2 ] || fail "gather.sh without a build exited $rc, not 2"

# lease.sh: its plan lists every part, finds each binary it runs in the bundle, and refuses bad use.
plan="$(G="$tmp/u" bash "$src/bench/gpu/lease.sh" --plan)" || fail "lease.sh --plan: $plan"
for p in 1 2 3; do echo "$plan" | grep -q "^part $p: at most" || fail "lease.sh --plan lists no part $p"; done
echo "$plan" | grep -q "every binary present" || fail "lease.sh --plan did not check the bundle"
rc=0; bash "$src/bench/gpu/lease.sh" 4 2>/dev/null || rc=$?; [ "$rc" -eq 2 ] || fail "lease.sh 4 exited $rc, not 2"
rc=0; env -u G bash "$src/bench/gpu/lease.sh" 1 2>/dev/null || rc=$?; [ "$rc" -eq 3 ] || fail "lease.sh without G exited $rc, not 3"
echo "ok: $(echo "$named" | wc -w) binaries named by the plans, all in the bundle; $(ls "$tmp/u/lib" | wc -l) libraries"
