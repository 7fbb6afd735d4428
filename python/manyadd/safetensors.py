"""safetensors, the project's one reader and writer on the Python side (the twin of
core/src/safetensors.cpp, which reads and writes every file the C++ tools use).

The format: 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets},
"__metadata__": {string: string}}, then the tensors' bytes, row-major, little-endian. Every file the
project writes carries metadata "checksum": "fnv1a64:" and 16 lowercase hex digits, the standard FNV-1a 64
(offset basis 14695981039346656037, prime 1099511628211) of the whole file -- length prefix, header and
data -- with those 16 digits read as sixteen '0' characters: every byte of the file is under it (names,
dtypes, shapes, offsets, the metadata such as a checkpoint's step, the data). The header holds
`"checksum":"fnv1a64:` exactly once, which is how a reader finds the digits. Legacy files (written
before the rule covered the header) carry 16 hex digits alone: the project's earlier FNV-1a variant
(offset basis 1469598103934665603) of the data section only; they are read unless
allow_legacy_checksum=False (their metadata and shapes are not protected).

    tensors, metadata = read(path)           # {name: array} in data order, {key: value}
    write(path, {"w": array, ...}, {"step": "10"})

read() checks everything before it builds a tensor, as strictly as the C++ reader: the header's size
and JSON, the dtypes (F64 F32 BF16 F16 I64 I32 I16 I8 U8 BOOL), integer shapes whose element and byte
counts do not overflow, offsets that are aligned, sorted, non-overlapping and cover the data section
exactly, no key twice in an object, the checksum, and (unless allowed) finite floating-point values.
Every problem is an InputError naming the file and the tensor.

Arrays: with numpy (when importable, or use_numpy=True) numpy arrays of the stored dtype (BF16 widened
exactly to float32, BOOL as bool); without it (or use_numpy=False) Tensor objects holding the flat
values in an array.array ('d' F64, 'f' F32/BF16/F16 widened exactly, integer codes for the integer
dtypes) or a list of bool (BOOL). Both have .shape and .tolist() (nested lists).

write() takes numpy arrays (dtype from the array) or Tensor(dtype, shape, values) (any dtype; floats
go to BF16/F16 through float32, rounded to nearest even, as the C++ writer does), writes the header
exactly as the C++ writer does (byte-identical files), and writes atomically (files.atomic_write).
"""
import array
import json
import math
import os
import struct
import sys

from .files import InputError, atomic_write, open_regular

__all__ = ["DTYPES", "InputError", "Tensor", "fnv1a64", "parse", "read", "to_bytes", "write"]

# name: bytes per element. The project's dtypes, in the C++ enum's order.
DTYPES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
FLOAT_DTYPES = ("F64", "F32", "BF16", "F16")
MAX_HEADER = 100 << 20  # as the reference implementation
MAX_DIM = 1 << 62  # element and byte counts beyond 2^62 are refused, not wrapped
FNV_OFFSET = 14695981039346656037  # the standard FNV-1a 64 offset basis
FNV_PRIME = 1099511628211
FNV_LEGACY_OFFSET = 1469598103934665603  # the legacy checksum's variant (a digit short of the standard)
CHECKSUM_PREFIX = "fnv1a64:"
_CHECKSUM_AT = b'"checksum":"fnv1a64:'  # where the digits are, once in every header written
_HEX = frozenset("0123456789abcdef")
_MASK64 = (1 << 64) - 1
_LITTLE = sys.byteorder == "little"

# numpy dtype (little-endian) of each stored dtype; BF16 is read as its 16 bits.
_NP_STORED = {"F64": "<f8", "F32": "<f4", "BF16": "<u2", "F16": "<f2", "I64": "<i8", "I32": "<i4",
              "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "u1"}
# numpy dtype name of an array -> stored dtype, for write().
_FROM_NP = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
            "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def _array_code(size, signed):
    for c in ("bhilq" if signed else "BHILQ"):
        if array.array(c).itemsize == size:
            return c
    raise RuntimeError("no array typecode of %d bytes" % size)


# array.array typecode of each dtype without numpy (floats: the widened value).
_AR_CODE = {"F64": "d", "F32": "f", "BF16": "f", "F16": "f", "I64": _array_code(8, True),
            "I32": _array_code(4, True), "I16": _array_code(2, True), "I8": "b", "U8": "B"}


def _numpy(use_numpy):
    """The numpy module, or None: use_numpy None = when importable, True = required, False = never."""
    if use_numpy is False:
        return None
    try:
        import numpy
    except ImportError:
        if use_numpy:
            raise
        return None
    return numpy


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Tensor:
    """A tensor without numpy: dtype name (a key of DTYPES), shape (tuple of ints) and the flat,
    row-major values (an array.array, a list, or anything with len() and iteration)."""

    __slots__ = ("dtype", "shape", "data")

    def __init__(self, dtype, shape, data):
        if dtype not in DTYPES:
            raise ValueError("dtype '%s' is not one of %s" % (dtype, " ".join(DTYPES)))
        shape = tuple(shape)
        if any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in shape):
            raise ValueError("shape %s is not a tuple of non-negative integers" % (shape,))
        if _numel(shape) != len(data):
            raise ValueError("shape %s does not hold %d values" % (shape, len(data)))
        self.dtype, self.shape, self.data = dtype, shape, data

    @property
    def size(self):
        return len(self.data)

    def tolist(self):
        """Nested lists of Python numbers, as numpy's tolist()."""
        def nest(lo, shape):
            if not shape:
                return self.data[lo]
            if len(shape) == 1:
                return list(self.data[lo:lo + shape[0]])
            step = _numel(shape[1:])
            return [nest(lo + i * step, shape[1:]) for i in range(shape[0])]
        return nest(0, self.shape)

    def __repr__(self):
        return "Tensor(%s, %s, %d values)" % (self.dtype, self.shape, len(self.data))


# ---- checksum ---------------------------------------------------------------------------------------

def fnv1a64(data, h=FNV_OFFSET, use_numpy=None):
    """FNV-1a 64 of `data` (bytes-like) continuing from state h. With numpy, a vectorized evaluation
    (below) that gives the same number as the byte loop (the test suite compares them)."""
    np = _numpy(use_numpy)
    mv = memoryview(data).cast("B")
    if np is None or len(mv) < 4096:
        for b in mv:
            h = ((h ^ b) * FNV_PRIME) & _MASK64
        return h
    return _fnv1a64_numpy(np, mv, h)


def _fnv1a64_numpy(np, mv, h):
    # FNV-1a is h <- (h ^ b) P mod 2^64, one byte at a time. Write h ^ b = h + d with
    # d = (l ^ b) - l, where l = h mod 256: d depends only on the low byte l. Then after c bytes
    #   h_c = P^c h_0 + sum_k d_k P^(c-k)   (mod 2^64),
    # a vectorized sum once every l_k is known. The low bytes follow l <- ((l ^ b) P) mod 256, and since
    # P is odd, bit i of (x P) is x_i xor bit i of (x mod 2^i) P: so bit i of l_(k+1) is bit i of l_k
    # xor a value computed from bits below i alone. Eight passes (bit 0 first), each a prefix xor over
    # the bytes, give every l_k.
    P8 = np.uint8(FNV_PRIME & 255)
    data = np.frombuffer(mv, dtype=np.uint8)
    for c0 in range(0, len(data), _CHUNK):
        b = data[c0:c0 + _CHUNK]
        c = len(b)
        l0 = h & 255
        low = np.zeros(c, dtype=np.uint8)  # l_k for k = 0 .. c - 1, built bit by bit
        for i in range(8):
            x_low = (low ^ b) & np.uint8((1 << i) - 1)
            t = ((b >> np.uint8(i)) ^ ((x_low * P8) >> np.uint8(i))) & np.uint8(1)
            bit = _prefix_xor_bits(np, t) ^ np.uint8((l0 >> i) & 1)  # bit i of l_1 .. l_c
            low[0] |= np.uint8(l0 & (1 << i))
            low[1:] |= bit[:-1] << np.uint8(i)
        d = (low ^ b).astype(np.int64) - low.astype(np.int64)
        with np.errstate(over="ignore"):
            s = int((d.astype(np.uint64) * _powers(np, c)).sum(dtype=np.uint64))
        h = (h * pow(FNV_PRIME, c, 1 << 64) + s) & _MASK64
    return h


_CHUNK = 1 << 22
_cache = {}


def _powers(np, c):
    """P^(c - j) mod 2^64 for j = 0 .. c - 1 (a tail of one cached array for a whole chunk)."""
    if "powers" not in _cache or len(_cache["powers"]) < c:
        n = max(c, min(_CHUNK, 1 << 16))
        with np.errstate(over="ignore"):
            _cache["powers"] = np.multiply.accumulate(np.full(n, FNV_PRIME, dtype=np.uint64))[::-1].copy()
    p = _cache["powers"]
    return p[len(p) - c:]


def _prefix_xor_bits(np, t):
    """Inclusive prefix xor of a 0/1 uint8 array, eight bits per step: within each packed byte from a
    table, across bytes by one accumulate over the bytes' parities."""
    if "within" not in _cache:
        within = np.zeros(256, dtype=np.uint8)  # bit j: xor of bits 0..j of the index
        for v in range(256):
            acc = out = 0
            for j in range(8):
                acc ^= (v >> j) & 1
                out |= acc << j
            within[v] = out
        _cache["within"] = within
    within = _cache["within"]
    pk = within[np.packbits(t, bitorder="little")]
    carry = np.bitwise_xor.accumulate(pk >> np.uint8(7))  # parity of every byte up to this one
    pk[1:] ^= carry[:-1] * np.uint8(255)
    return np.unpackbits(pk, bitorder="little")[:len(t)]


# ---- reading ----------------------------------------------------------------------------------------

def _reject_constant(name):
    raise ValueError("%s is not JSON" % name)


def _unique_keys(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError("the key '%s' appears twice" % k)
        out[k] = v
    return out


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_hex16(s):
    return len(s) == 16 and set(s) <= _HEX


def _check_checksum(mv, hl, stored, bad, verify, allow_legacy, use_numpy):
    """The stored checksum against the file (module docstring: the rule and the legacy rule)."""
    data0 = 8 + hl
    if stored.startswith(CHECKSUM_PREFIX) and _is_hex16(stored[len(CHECKSUM_PREFIX):]):
        header = bytes(mv[8:data0])
        k = header.find(_CHECKSUM_AT)
        at = 8 + k + len(_CHECKSUM_AT)
        if (k < 0 or header.find(_CHECKSUM_AT, k + 1) >= 0 or at + 16 > data0
                or bytes(mv[at:at + 16]) != stored[-16:].encode()):
            raise bad('the checksum is not written as "checksum":"%s<16 hex digits>" once in the header'
                      % CHECKSUM_PREFIX)
        if not verify:
            return
        h = fnv1a64(mv[:at], use_numpy=use_numpy)
        h = fnv1a64(b"0" * 16, h)
        got = CHECKSUM_PREFIX + "%016x" % fnv1a64(mv[at + 16:], h, use_numpy=use_numpy)
    elif _is_hex16(stored):
        if not allow_legacy:
            raise bad("legacy checksum (of the data alone: the metadata and shapes are not under it) where "
                      "the whole file must be checksummed")
        if not verify:
            return
        got = "%016x" % fnv1a64(mv[data0:], FNV_LEGACY_OFFSET, use_numpy=use_numpy)
    else:
        raise bad("checksum '%s' is neither %s<16 hex digits> nor a legacy 16-digit checksum"
                  % (stored, CHECKSUM_PREFIX))
    if got != stored:
        raise bad("checksum mismatch (stored %s, computed %s): corrupted or truncated" % (stored, got))


def parse(buf, what="<bytes>", *, require_checksum=True, verify_checksum=True, allow_nonfinite=False,
          allow_legacy_checksum=True, use_numpy=None):
    """The tensors and metadata of a safetensors file held in `buf` (bytes-like; numpy arrays share
    its memory when it is writable, e.g. a bytearray). `what` names it in messages. See read()."""
    np = _numpy(use_numpy)

    def bad(why):
        return InputError("'%s' is not a valid safetensors file: %s" % (what, why))

    mv = memoryview(buf).cast("B")
    if len(mv) < 8:
        raise bad("only %d bytes (truncated)" % len(mv))
    (hl,) = struct.unpack("<Q", mv[:8])
    if hl > MAX_HEADER:
        raise bad("header length %d exceeds %d bytes" % (hl, MAX_HEADER))
    if hl > len(mv) - 8:
        raise bad("header claims %d bytes, file has %d (truncated)" % (hl, len(mv)))
    try:
        header = json.loads(bytes(mv[8:8 + hl]).decode("utf-8"), parse_constant=_reject_constant,
                            object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError) as e:
        raise bad("header is not JSON: %s" % e) from None
    if not isinstance(header, dict):
        raise bad("header is not a JSON object")
    data0 = 8 + hl
    dsize = len(mv) - data0
    metadata = {}
    if "__metadata__" in header:
        m = header["__metadata__"]
        if not isinstance(m, dict):
            raise bad("__metadata__ is not an object")
        for k, v in m.items():
            if not isinstance(v, str):
                raise bad("__metadata__ value '%s' is not a string" % k)
            metadata[k] = v

    # Every entry checked before any tensor is built.
    entries = []  # (begin, end, name, dtype, shape)
    for name, e in header.items():
        if name == "__metadata__":
            continue

        def tbad(why):
            return bad("tensor '%s': %s" % (name, why))

        if not isinstance(e, dict):
            raise tbad("entry is not an object")
        for k in e:
            if k not in ("dtype", "shape", "data_offsets"):
                raise tbad("unknown field '%s'" % k)
        dtype = e.get("dtype")
        if not isinstance(dtype, str):
            raise tbad("dtype missing or not a string")
        if dtype not in DTYPES:
            raise tbad("dtype '%s' is not one of %s" % (dtype, " ".join(DTYPES)))
        shape = e.get("shape")
        if not isinstance(shape, list):
            raise tbad("shape missing or not an array")
        for d in shape:
            if not _is_uint(d):
                raise tbad("shape entry %s is not a non-negative integer" % json.dumps(d))
            if d > MAX_DIM:
                raise tbad("shape entry %d is too large" % d)
        esize = DTYPES[dtype]
        n = _numel(shape)
        if n > MAX_DIM // esize:
            raise tbad("shape %s has too many elements" % shape)
        offs = e.get("data_offsets")
        if not (isinstance(offs, list) and len(offs) == 2 and _is_uint(offs[0]) and _is_uint(offs[1])):
            raise tbad("data_offsets must be two non-negative integers")
        begin, end = offs
        if begin > end or end > dsize:
            raise tbad("data_offsets [%d, %d] outside the %d data bytes" % (begin, end, dsize))
        if end - begin != n * esize:
            raise tbad("data_offsets span %d bytes, shape %s of %s needs %d" % (end - begin, shape, dtype, n * esize))
        if begin % esize:
            raise tbad("data offset %d is not aligned to %d bytes" % (begin, esize))
        entries.append((begin, end, name, dtype, tuple(shape)))
    entries.sort(key=lambda t: (t[0], t[1]))
    at = 0
    for begin, end, name, _, _ in entries:
        if begin != at:
            raise bad("tensor '%s' overlaps the tensor before it" % name if begin < at
                      else "%d bytes before tensor '%s' belong to no tensor" % (begin - at, name))
        at = end
    if at != dsize:
        raise bad("%d trailing data bytes belong to no tensor" % (dsize - at))
    if "checksum" not in metadata:
        if require_checksum:
            raise bad("no checksum in the metadata")
    else:
        _check_checksum(mv, hl, metadata["checksum"], bad, verify_checksum, allow_legacy_checksum, use_numpy)

    tensors = {}
    for begin, end, name, dtype, shape in entries:
        raw = mv[data0 + begin:data0 + end]
        t = _decode_numpy(np, raw, dtype, shape) if np is not None else _decode(raw, dtype, shape)
        if not allow_nonfinite and dtype in FLOAT_DTYPES:
            k = _first_nonfinite(np, t)
            if k is not None:
                raise bad("tensor '%s': element %d is not finite" % (name, k))
        tensors[name] = t
    return tensors, metadata


def _decode_numpy(np, raw, dtype, shape):
    n = len(raw) // DTYPES[dtype]
    a = np.frombuffer(raw, dtype=_NP_STORED[dtype], count=n) if n else np.zeros(0, dtype=_NP_STORED[dtype])
    if dtype == "BF16":  # the 16 bits are the top half of a float32: exact
        a = (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
    elif dtype == "BOOL":
        a = a != 0
    return a.reshape(shape)


def _decode(raw, dtype, shape):
    if dtype == "BOOL":
        return Tensor(dtype, shape, [b != 0 for b in raw])
    if dtype == "F16":
        return Tensor(dtype, shape, array.array("f", struct.unpack("<%de" % (len(raw) // 2), raw)))
    if dtype == "BF16":  # each value's two bytes become the top half of a float32: exact
        wide = bytearray(2 * len(raw))
        wide[2::4], wide[3::4] = raw[0::2], raw[1::2]
        raw = wide
    a = array.array(_AR_CODE[dtype])
    a.frombytes(raw)
    if not _LITTLE:
        a.byteswap()
    return Tensor(dtype, shape, a)


def _first_nonfinite(np, t):
    if np is not None:
        bad = np.flatnonzero(~np.isfinite(t.reshape(-1)))
        return int(bad[0]) if len(bad) else None
    for k, v in enumerate(t.data):
        if not math.isfinite(v):
            return k
    return None


def read(path, *, require_checksum=True, verify_checksum=True, allow_nonfinite=False,
         allow_legacy_checksum=True, max_bytes=1 << 36, use_numpy=None):
    """(tensors, metadata) of the safetensors file at `path`: tensors {name: array} in data order,
    metadata {key: value}. InputError for anything malformed (module docstring).
      require_checksum  refuse a file without metadata "checksum" (other writers' files have none:
                        pass False for them; a checksum present is checked either way)
      verify_checksum   False skips computing it (multi-GB files without numpy: the byte loop runs at
                        a few MB/s); everything else is still checked
      allow_nonfinite   accept NaN / Inf in floating-point tensors
      allow_legacy_checksum  accept a legacy checksum (of the data alone; module docstring)
      max_bytes         refuse longer files before reading them
      use_numpy         None: numpy arrays when numpy is importable; True: require numpy; False: never
    """
    path = os.fspath(path)
    with open_regular(path) as f:  # a FIFO, a device or a directory is refused before reading
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise InputError("'%s' has %d bytes, more than the %d this reader accepts" % (path, size, max_bytes))
        buf = bytearray()
        try:  # in pieces: a growing file stops at max_bytes
            while True:
                piece = f.read(min(1 << 26, max_bytes + 1 - len(buf)))
                if not piece:
                    break
                buf += piece
                if len(buf) > max_bytes:
                    raise InputError("'%s' is longer than the %d bytes this reader accepts" % (path, max_bytes))
        except OSError as e:
            raise InputError("cannot read '%s': %s" % (path, e.strerror or e)) from None
    return parse(buf, path, require_checksum=require_checksum, verify_checksum=verify_checksum,
                 allow_nonfinite=allow_nonfinite, allow_legacy_checksum=allow_legacy_checksum, use_numpy=use_numpy)


# ---- writing ----------------------------------------------------------------------------------------

def _f32_to_bf16_bits(bits):
    """Round a float32 bit pattern to bfloat16: nearest, ties to even; NaN stays a (quiet) NaN."""
    if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x7FFFFF):
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _integral(v, dtype):
    if isinstance(v, float):
        if not v.is_integer():
            raise ValueError("%s value %r is not an integer" % (dtype, v))
        return int(v)
    return int(v)


def _encode(dtype, values):
    """The little-endian bytes of the flat `values` stored as `dtype` (standard library only)."""
    if dtype == "BOOL":
        return bytes(1 if v else 0 for v in values)
    if dtype in ("BF16", "F16"):
        f32 = array.array("f", values)  # through float32 first, as the C++ writer
        if dtype == "F16":  # values beyond the largest half round to infinity (struct would refuse them)
            return struct.pack("<%de" % len(f32), *(math.copysign(math.inf, v) if abs(v) >= 65520.0 else v
                                                    for v in f32))
        bits = array.array(_array_code(4, False), f32.tobytes())
        return struct.pack("<%dH" % len(bits), *(_f32_to_bf16_bits(b) for b in bits))
    try:
        a = array.array(_AR_CODE[dtype], values if dtype in FLOAT_DTYPES else (_integral(v, dtype) for v in values))
    except OverflowError as e:
        raise ValueError("a value does not fit %s: %s" % (dtype, e)) from None
    if not _LITTLE:
        a.byteswap()
    return a.tobytes()


def _encode_numpy(np, dtype, values):
    a = np.asarray(values).reshape(-1)
    if dtype == "BOOL":
        return (a != 0).astype("u1").tobytes()
    if dtype in ("BF16", "F16"):
        f32 = a.astype("<f4")  # through float32 first, as the C++ writer
        if dtype == "F16":
            with np.errstate(over="ignore"):
                return f32.astype("<f2").tobytes()
        b = f32.view("<u4").astype(np.uint64)  # room for the rounding increment
        nan = np.isnan(f32)
        out = ((b + 0x7FFF + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)) & np.uint64(0xFFFF)
        out[nan] = (b[nan] >> np.uint64(16)) | np.uint64(0x40)
        return out.astype("<u2").tobytes()
    target = np.dtype(_NP_STORED[dtype])
    if dtype not in FLOAT_DTYPES:
        if a.dtype.kind == "f" and not np.all(a == np.trunc(a)):
            raise ValueError("%s values must be integers" % dtype)
        info = np.iinfo(target)
        if a.size and (a.min() < info.min or a.max() > info.max):
            raise ValueError("a value does not fit %s" % dtype)
    return a.astype(target).tobytes()


def _tensor_bytes(name, value, np):
    """(dtype, shape, bytes) of one tensor given as a numpy array or a Tensor."""
    if isinstance(value, Tensor):
        data = value.data
        if np is not None and isinstance(data, np.ndarray):
            return value.dtype, value.shape, _encode_numpy(np, value.dtype, data)
        return value.dtype, value.shape, _encode(value.dtype, data)
    if np is not None and isinstance(value, np.ndarray):
        dtype = _FROM_NP.get(value.dtype.name)
        if dtype is None:
            raise ValueError("tensor '%s': numpy dtype %s has no safetensors dtype here (%s)"
                             % (name, value.dtype, " ".join(_FROM_NP)))
        return dtype, tuple(int(d) for d in value.shape), _encode_numpy(np, dtype, value)
    raise TypeError("tensor '%s': give a numpy array or a Tensor(dtype, shape, values), not %s"
                    % (name, type(value).__name__))


def to_bytes(tensors, metadata=None):
    """The bytes of a safetensors file: tensors {name: array} (or (name, array) pairs) in that order,
    metadata {str: str} plus the checksum (the key "checksum" is the writer's). The same bytes as the
    C++ writer's for the same tensors and metadata."""
    np = _numpy(None)
    items = list(tensors.items()) if hasattr(tensors, "items") else list(tensors)
    meta = dict(metadata or {})
    if "checksum" in meta:
        raise ValueError("metadata key 'checksum' is reserved for the writer")
    if any(not isinstance(k, str) or not isinstance(v, str) for k, v in meta.items()):
        raise ValueError("metadata keys and values must be strings")
    header, chunks, off = {}, [], 0
    for name, value in items:
        if not isinstance(name, str) or name == "__metadata__" or name in header:
            raise ValueError("tensor name %r is reserved, repeated or not a string" % (name,))
        dtype, shape, raw = _tensor_bytes(name, value, np)
        if _numel(shape) > MAX_DIM // DTYPES[dtype]:
            raise ValueError("tensor '%s' is too large" % name)
        if off % DTYPES[dtype]:  # readers refuse it: order the tensors by element size, largest first
            raise ValueError("tensor '%s' (%s) would start at data offset %d, not aligned to %d bytes"
                             % (name, dtype, off, DTYPES[dtype]))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    data = b"".join(chunks)
    meta["checksum"] = CHECKSUM_PREFIX + "0" * 16  # the digits are patched in below
    h = json.dumps(dict([("__metadata__", dict(sorted(meta.items())))] + list(header.items())),
                   separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    k = h.find(_CHECKSUM_AT)
    if k < 0 or h.find(_CHECKSUM_AT, k + 1) >= 0:
        raise ValueError("the checksum's place in the header is not unique (a metadata key or value repeats it)")
    out = bytearray(struct.pack("<Q", len(h)) + h + data)
    at = 8 + k + len(_CHECKSUM_AT)
    out[at:at + 16] = b"%016x" % fnv1a64(out)
    return bytes(out)


def write(path, tensors, metadata=None):
    """Writes to_bytes(tensors, metadata) to `path` atomically (files.atomic_write: the target must be
    new or a regular file; a symbolic link, directory or device is refused with InputError)."""
    atomic_write(path, to_bytes(tensors, metadata))
