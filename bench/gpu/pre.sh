# Sourced (bash) at the start of every command on a GPU machine:   . bench/gpu/pre.sh
# Unpacks .gpu/bundle.tar.xz (made here by bench/gpu/gather.sh) into $MANYADD_GPU_DIR (default
# /tmp/manyadd-gpu), again whenever the carried bundle changed, and sets
#   G                    the unpacked bundle (binaries in $G/bin)
#   LD_LIBRARY_PATH      the bundle's libraries, then the image's cuBLAS
#   MANYADD_SOURCE_DIR   this checkout (the tests find models/ and tests/data/ through it)
# Returns 3, saying why, when there is no bundle or a binary would not load: run nothing else then.
G="${MANYADD_GPU_DIR:-/tmp/manyadd-gpu}"
_mg_src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
_mg_bundle="$_mg_src/.gpu/bundle.tar.xz"
if [ ! -f "$_mg_bundle" ]; then
  echo "pre: no .gpu/bundle.tar.xz in this checkout (carry .gpu; bench/gpu/gather.sh makes it)" >&2
  unset _mg_src _mg_bundle
  return 3 2>/dev/null || exit 3
fi
_mg_sum="$(cksum < "$_mg_bundle")"
if [ "$(cat "$G/.bundle-cksum" 2>/dev/null)" != "$_mg_sum" ]; then
  rm -rf "$G" && mkdir -p "$G" && tar -C "$G" -xJf "$_mg_bundle" && echo "$_mg_sum" > "$G/.bundle-cksum"
fi
_mg_cublas="$(find /usr/local /opt /usr/lib /usr/lib64 -name 'libcublas.so.13*' 2>/dev/null | head -1)"
_mg_cublas="${_mg_cublas:+$(dirname "$_mg_cublas")}"
export G MANYADD_SOURCE_DIR="$_mg_src" LD_LIBRARY_PATH="$G/lib${_mg_cublas:+:$_mg_cublas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
_mg_missing="$(for b in "$G"/bin/*; do ldd "$b" | grep 'not found' | sed "s|^|$(basename "$b"): |"; done)"
unset _mg_src _mg_bundle _mg_sum _mg_cublas
if [ -n "$_mg_missing" ]; then
  echo "pre: libraries not found:" >&2; echo "$_mg_missing" >&2
  unset _mg_missing
  return 3 2>/dev/null || exit 3
fi
unset _mg_missing
