#!/usr/bin/env bash
# Packs what a GPU machine needs to run this project's GPU work without building there: the tools,
# the CUDA benchmarks and the CUDA test binaries of a build, and the shared libraries they name that a
# bare CUDA image may lack (cuBLAS and the driver excepted: they come from the image), into one
# compressed bundle small enough to travel with the working tree.
#   bench/gpu/gather.sh [BUILD_DIR] [DEST_DIR]     (defaults: build, .gpu)
# writes DEST_DIR/bundle.tar.xz (bin/, lib/, MANIFEST); on the GPU machine `. bench/gpu/pre.sh` unpacks
# it and sets the environment (bench/results/GPU-NEXT.md). Exit 2 on a missing build or binary.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$here/build}"
dest="${2:-$here/.gpu}"
limit_mib=40   # the bundle travels with the working tree (64 MiB in all, the repository included)

[ -d "$build" ] || { echo "gather: no build directory '$build' (run ./x build first)" >&2; exit 2; }
bins=(learn/train learn/evaluate learn/grid_png learn/dump_batches learn/dump_attention learn/compare_attention
      learn/format_ids proofs-check/verify_construction construct/export_qkv
      bench/bench_cuda bench/bench_cuda_train bench/bench_cuda_kernels)
# The test binaries with GPU suites (tests/CMakeLists.txt: RUN ... gpu).
for t in "$build"/tests/test_cuda_* "$build"/tests/test_mma_probe; do
  [ -x "$t" ] && [ -f "$t" ] && bins+=("tests/$(basename "$t")")
done
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in "${bins[@]}"; do
  [ -x "$build/$b" ] || { echo "gather: '$build/$b' is missing (a CUDA build: ./x build with nvcc present)" >&2; exit 2; }
  cp "$build/$b" "$stage/bin/"
done
strip "$stage"/bin/* 2>/dev/null || true
# Every library the binaries name except the C runtime (the image has one) and CUDA's own; libstdc++ and
# libgcc_s travel too, in case the image's are older than the compiler's here.
for b in "$stage"/bin/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u \
  | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so|libcublas|libcudart|libcuda\.' \
  | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
{
  echo "built from: $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "on: $(uname -srm), $(ldd --version | head -1)"
  (cd "$stage" && ls bin lib)
} > "$stage/MANIFEST"
mkdir -p "$dest"
tar -C "$stage" -cJf "$dest/bundle.tar.xz.tmp" bin lib MANIFEST
mv "$dest/bundle.tar.xz.tmp" "$dest/bundle.tar.xz"
size=$(stat -c %s "$dest/bundle.tar.xz")
echo "gather: $dest/bundle.tar.xz, $((size / 1048576)) MiB, ${#bins[@]} binaries, $(ls "$stage/lib" | wc -l) libraries"
if [ "$size" -gt $((limit_mib * 1048576)) ]; then
  echo "gather: the bundle exceeds $limit_mib MiB: it would not travel with the working tree" >&2
  exit 1
fi
