#!/usr/bin/env python3
"""python/manyadd: the safetensors reader and writer and the atomic writer, against the C++ ones.

- every dtype round-trips, and both writers (this one and core/'s) produce tests/data/every_dtype.safetensors
  byte for byte (the C++ half is tests/test_core.cpp);
- files written by the C++ tools (verify_construction --export, export_qkv's streaming writer, the
  learned models under models/) are read, their checksums verified, and rewritten (byte for byte where
  the current C++ writer wrote them);
- every malformed file of tests/data/safetensors_cases.json (the list tests/test_core.cpp refuses too),
  every truncation of a valid file and a flipped data byte are refused with InputError;
- the atomic writer refuses links, directories, devices and missing directories and leaves no temporary;
- the vectorized checksum equals the byte loop.

Run by ctest twice: MANYADD_TEST_NUMPY=0 (standard library only) and =1 (numpy arrays; exit code 77,
reported by ctest as skipped, where numpy is not installed). VERIFY_CONSTRUCTION and EXPORT_QKV name
the tools (tests/CMakeLists.txt sets them); MANYADD_SOURCE_DIR the repository (default: this file's).
"""
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("MANYADD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SOURCE, "python"))
from manyadd import files, safetensors as st  # noqa: E402

USE_NUMPY = os.environ.get("MANYADD_TEST_NUMPY", "0") == "1"
np = st._numpy(None) if USE_NUMPY else None


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


CASES = json.loads(slurp(os.path.join(SOURCE, "tests", "data", "safetensors_cases.json")))
GOLDEN = os.path.join(SOURCE, "tests", "data", "every_dtype.safetensors")


def read(path, **kw):
    return st.read(path, use_numpy=USE_NUMPY, **kw)


def parse(buf, **kw):
    return st.parse(buf, "test", use_numpy=USE_NUMPY, **kw)


def flat(t):
    """The values of a tensor as a flat list of Python numbers (either representation)."""
    return t.reshape(-1).tolist() if np is not None else list(t.data)


def with_header(header, data):
    h = header.encode("utf-8")
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def case_bytes(c):
    b = bytes.fromhex(c["file_hex"]) if "file_hex" in c else with_header(c["header"], bytes.fromhex(c["data_hex"]))
    return b[:c["truncate"]] if "truncate" in c else b


def tool(env, *args):
    exe = os.environ.get(env)
    if not exe:
        raise AssertionError("%s is not set: it names the built tool (ctest sets it)" % env)
    r = subprocess.run([exe] + list(args), capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError("%s %s: exit %d\n%s%s" % (exe, " ".join(args), r.returncode, r.stdout, r.stderr))
    return r


class TempDir(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="manyadd_python_io_")

    def tearDown(self):
        shutil.rmtree(self.dir)


class RoundTrip(TempDir):
    def test_every_dtype_file_is_byte_identical_and_reads_back(self):
        case = CASES["every_dtype"]
        tensors = {t["name"]: st.Tensor(t["dtype"], t["shape"], t["values"]) for t in case["tensors"]}
        golden = slurp(GOLDEN)
        self.assertEqual(st.to_bytes(tensors, case["metadata"]), golden)
        got, meta = read(GOLDEN)
        self.assertEqual(list(got), [t["name"] for t in case["tensors"]])  # data order
        for t in case["tensors"]:
            a = got[t["name"]]
            self.assertEqual(tuple(a.shape), tuple(t["shape"]), t["name"])
            self.assertEqual(flat(a), [type(flat(a)[0])(v) for v in t.get("stored", t["values"])] if t["values"] else [],
                             t["name"])
            if np is not None:
                want = {"F64": "float64", "F32": "float32", "BF16": "float32", "F16": "float16", "I64": "int64",
                        "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}[t["dtype"]]
                self.assertEqual(a.dtype.name, want, t["name"])
            else:
                self.assertEqual(a.dtype, t["dtype"])
        self.assertEqual({k: v for k, v in meta.items() if k != "checksum"}, case["metadata"])
        # What was read writes back to the same bytes (numpy arrays infer their dtype; BF16 needs a Tensor).
        again = {}
        for t in case["tensors"]:
            a = got[t["name"]]
            again[t["name"]] = st.Tensor("BF16", a.shape, a.reshape(-1)) if np is not None and t["dtype"] == "BF16" else a
        self.assertEqual(st.to_bytes(again, case["metadata"]), golden)

    def test_random_values_round_trip_through_a_file(self):
        rng = random.Random(7)
        for dtype in st.DTYPES:
            shape = (rng.randrange(0, 4), rng.randrange(1, 5))
            n = shape[0] * shape[1]
            if dtype in ("F64",):
                vals = [rng.uniform(-1e300, 1e300) for _ in range(n)]
            elif dtype in ("F32", "BF16", "F16"):
                # values the dtype holds exactly: a few significant bits, a moderate exponent
                vals = [math.ldexp(rng.randrange(-255, 256), rng.randrange(-14, 8)) for _ in range(n)]
            elif dtype == "BOOL":
                vals = [rng.random() < 0.5 for _ in range(n)]
            else:
                bits = 8 * st.DTYPES[dtype]
                lo, hi = (0, 2 ** bits - 1) if dtype == "U8" else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
                vals = [lo, hi] + [rng.randint(lo, hi) for _ in range(n)]
                vals = vals[:n]
            path = os.path.join(self.dir, dtype + ".safetensors")
            st.write(path, {"x": st.Tensor(dtype, shape, vals)}, {"dtype": dtype})
            got, meta = read(path)
            self.assertEqual(flat(got["x"]), [type(flat(got["x"])[0])(v) for v in vals] if vals else [], dtype)
            self.assertEqual(meta["dtype"], dtype)
            if np is not None and dtype != "BF16":  # the numpy writer gives the same bytes
                self.assertEqual(st.to_bytes({"x": got["x"]}, {"dtype": dtype}), slurp(path), dtype)

    def test_writer_refusals(self):
        with self.assertRaisesRegex(ValueError, "not aligned"):
            st.to_bytes({"u": st.Tensor("U8", (1,), [1]), "f": st.Tensor("F32", (1,), [1.0])})
        with self.assertRaisesRegex(ValueError, "reserved"):
            st.to_bytes({"a": st.Tensor("F32", (1,), [1.0])}, {"checksum": "0"})
        with self.assertRaisesRegex(ValueError, "reserved"):
            st.to_bytes([("__metadata__", st.Tensor("F32", (1,), [1.0]))])
        with self.assertRaisesRegex(ValueError, "repeated"):
            st.to_bytes([("a", st.Tensor("F32", (1,), [1.0])), ("a", st.Tensor("F32", (1,), [1.0]))])
        with self.assertRaises(ValueError):
            st.Tensor("Q8", (1,), [1])
        with self.assertRaises(ValueError):
            st.Tensor("F32", (2,), [1.0])
        for dtype, v in (("I8", 128), ("U8", -1), ("I16", 1 << 15), ("I32", 1.5)):
            with self.assertRaises(ValueError, msg=dtype):
                st.to_bytes({"a": st.Tensor(dtype, (1,), [v])})
        with self.assertRaises(TypeError):
            st.to_bytes({"a": [1.0, 2.0]})


class CppFiles(TempDir):
    """Files the C++ writer produced: checksums verified on read, and this writer reproduces them."""

    def assert_rewrites(self, path, tensors, meta, identically=True):
        """This writer, given what was read, writes the same data section (the same checksum) and a file
        that reads back equal; `identically`: the very same bytes (files of the current C++ writer;
        older ones, e.g. the committed models, ordered their header keys alphabetically)."""
        rest = {k: v for k, v in meta.items() if k != "checksum"}
        again = st.to_bytes(tensors, rest)
        t2, m2 = parse(again, allow_legacy_checksum=False)
        self.assertEqual({k: v for k, v in m2.items() if k != "checksum"}, rest, path)
        if identically:
            self.assertEqual(m2["checksum"], meta["checksum"], path)
        self.assertEqual(list(t2), list(tensors), path)
        for name in tensors:
            self.assertEqual(flat(t2[name]), flat(tensors[name]), name)
        if identically:
            self.assertEqual(again, slurp(path), path)

    def test_exported_constructed_model(self):
        out = os.path.join(self.dir, "export")
        tool("VERIFY_CONSTRUCTION", "--n", "2", "--m", "2", "--export", out)
        cfg = json.loads(slurp(os.path.join(out, "config.json")))
        tensors, meta = read(os.path.join(out, "model.safetensors"))
        self.assertRegex(meta["checksum"], "^fnv1a64:[0-9a-f]{16}$")
        d = cfg["d"]
        self.assertEqual(len(cfg["residual_dims"]), d)
        for h in cfg["heads"]:
            Q, K, V, U = (tensors["heads.%d.%s" % (h["index"], m)] for m in "QKVU")
            self.assertEqual(tuple(Q.shape), (h["d_qk"], d))
            self.assertEqual(tuple(K.shape), (h["d_qk"], d))
            self.assertEqual(tuple(V.shape), (h["d_v"], d))
            self.assertEqual(tuple(U.shape), (d, h["d_v"]))
        wout = tensors["readout.Wout"]
        self.assertEqual(tuple(wout.shape), (len(cfg["vocab"]), d))
        # The readout of the construction (docs/construction.md): SUM_k -> token k with weight 1,
        # ARROW -> '>' with 10, EOS -> '$' with 100.
        W = wout.tolist()
        dim = cfg["residual_dims"].index
        self.assertEqual([W[k][dim("SUM_%d" % k)] for k in range(10)], [1.0] * 10)
        self.assertEqual(W[cfg["vocab"].index(">")][dim("ARROW")], 10.0)
        self.assertEqual(W[cfg["vocab"].index("$")][dim("EOS")], 100.0)
        self.assert_rewrites(os.path.join(out, "model.safetensors"), tensors, meta)

    def test_streamed_qkv_rows(self):
        out = os.path.join(self.dir, "qkv")
        tool("EXPORT_QKV", "--n", "2", "--m", "2", "--out", out, "--seed", "3")
        path = os.path.join(out, "qkv.safetensors")
        tensors, meta = read(path)
        N = int(meta["N"])
        self.assertEqual(N, (2 * 2 + 1) * (2 + 1 + 0 + 1))  # (2m+1)(l+1), l = n + 1 + floor(log10 m)
        self.assertEqual(list(tensors), ["q1", "k1", "v1", "q2", "k2", "v2", "q3", "k3", "v3", "q4", "k4", "v4",
                                         "ref1", "ref2", "ref3", "ref4"])
        first = int(meta["first"])
        for h in range(1, 5):
            self.assertEqual(tuple(tensors["ref%d" % h].shape), (N - first, 1))  # the structured engine's outputs
            self.assertEqual(tuple(tensors["q%d" % h].shape)[0], N)
            self.assertEqual(tuple(tensors["k%d" % h].shape), tuple(tensors["q%d" % h].shape))
            self.assertEqual(tuple(tensors["v%d" % h].shape), (N, 1))
        self.assert_rewrites(path, tensors, meta)

    def test_export_qkv_refuses_bad_input_with_exit_2(self):
        blocker = os.path.join(self.dir, "a_file")
        files.atomic_write(blocker, b"x")
        for args in (["--n", "2", "--m", "2", "--out", os.path.join(blocker, "sub")],  # was exit 3
                     ["--n", "3.5", "--m", "2", "--out", self.dir], ["--n", "1000000", "--m", "2", "--out", self.dir]):
            r = subprocess.run([os.environ["EXPORT_QKV"]] + args, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertTrue(r.stderr.startswith("export_qkv: "), r.stderr)

    def test_learned_models(self):
        models = os.path.join(SOURCE, "models")
        dirs = sorted(d for d in os.listdir(models) if os.path.isfile(os.path.join(models, d, "model.safetensors")))
        self.assertTrue(dirs, "no learned model under models/")
        for d in dirs:
            full = json.loads(slurp(os.path.join(models, d, "config.json")))
            cfg = full["model"]
            path = os.path.join(models, d, "model.safetensors")
            tensors, meta = read(path)  # checksum required and verified: the legacy rule (the first models, written
            # before it changed) or today's fnv1a64 over the whole file
            self.assertRegex(meta["checksum"], "^([0-9a-f]{16}|fnv1a64:[0-9a-f]{16})$", d)
            if full.get("family") == "grid-ut":  # train_grid's model (learn/README.md, the grid universal transformer)
                self.assertEqual(tuple(tensors["embedding.weight"].shape), (cfg["vocab"], cfg["d_emb"]), d)
                self.assertEqual(tuple(tensors["decoder.weight"].shape), (cfg["vocab"], cfg["d_emb"]), d)
            else:
                self.assertEqual(tuple(tensors["tok_emb.weight"].shape), (cfg["vocab"], cfg["d_model"]), d)
                self.assertEqual(tuple(tensors["lm_head.weight"].shape), (cfg["vocab"], cfg["d_model"]), d)
            self.assert_rewrites(path, tensors, meta, identically=False)


class Refusals(TempDir):
    def assert_refused(self, buf, needle, **kw):
        with self.assertRaises(st.InputError) as e:
            parse(buf, **kw)
        self.assertIn(needle, str(e.exception))

    def test_shared_malformed_cases(self):
        good = CASES["malformed"][1]
        parse(with_header(good["header"], bytes.fromhex(good["data_hex"])), require_checksum=False)  # the base is fine
        self.assertGreater(len(CASES["malformed"]), 20)
        for c in CASES["malformed"]:
            with self.subTest(c["why"]):
                self.assert_refused(case_bytes(c), c["needle"], require_checksum=c.get("require_checksum", False),
                                    allow_legacy_checksum=c.get("allow_legacy_checksum", True))

    def test_checksum_is_standard_fnv1a64_over_the_whole_file(self):
        # Published FNV-1a 64 test vectors (the FNV reference test suite; Go's hash/fnv golden values).
        for text, h in ((b"", 0xcbf29ce484222325), (b"a", 0xaf63dc4c8601ec8c), (b"ab", 0x089c4407b545986a),
                        (b"abc", 0xe71fa2190541574b), (b"foobar", 0x85944171f73967e8)):
            self.assertEqual(st.fnv1a64(text), h, text)
        f = st.to_bytes({"a": st.Tensor("F32", (2, 3), [1, 2, 3, 4, 5, 6])}, {"step": "15"})
        k = f.index(b'"checksum":"fnv1a64:') + len(b'"checksum":"fnv1a64:')
        self.assertEqual(f[k:k + 16], b"%016x" % st.fnv1a64(f[:k] + b"0" * 16 + f[k + 16:]))
        for old, new in ((b'"step":"15"', b'"step":"25"'), (b"[2,3]", b"[3,2]"), (b'"a"', b'"b"')):
            self.assert_refused(f.replace(old, new), "checksum mismatch")
        legacy = bytes.fromhex(CASES["legacy_file_hex"])
        _, meta = parse(legacy)  # accepted by default
        self.assertEqual(meta["step"], "15")
        self.assert_refused(legacy, "legacy checksum", allow_legacy_checksum=False)

    def test_checksum_and_truncations(self):
        v = st.to_bytes({"a": st.Tensor("F32", (3,), [1.0, 2.0, 3.0])})
        parse(v)
        w = bytearray(v)
        w[-2] ^= 1
        self.assert_refused(bytes(w), "checksum mismatch")
        parse(bytes(w), verify_checksum=False)  # documented: only the checksum is skipped
        for k in range(len(v)):
            with self.assertRaises(st.InputError, msg=k):
                parse(v[:k])

    def test_options(self):
        nan = with_header('{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}', struct.pack("<d", math.nan))
        self.assert_refused(nan, "not finite", require_checksum=False)
        a, _ = parse(nan, require_checksum=False, allow_nonfinite=True)
        self.assertTrue(math.isnan(flat(a["a"])[0]))
        path = os.path.join(self.dir, "f.safetensors")
        st.write(path, {"a": st.Tensor("F32", (2,), [1.0, 2.0])})
        with self.assertRaisesRegex(st.InputError, "more than"):
            read(path, max_bytes=10)
        with self.assertRaisesRegex(st.InputError, "directory"):
            read(self.dir)
        with self.assertRaisesRegex(st.InputError, "cannot read"):
            read(os.path.join(self.dir, "missing"))


class AtomicWrite(TempDir):
    def test_refuses_what_a_rename_would_destroy(self):
        d = self.dir
        for bad in ("/dev/null", d, d + "/", os.path.join(d, "missing_dir", "f"), ""):
            with self.assertRaises(files.InputError, msg=bad):
                files.atomic_write(bad, b"x")
        target = os.path.join(d, "target")
        files.atomic_write(target, b"old")
        os.symlink(target, os.path.join(d, "link"))
        with self.assertRaisesRegex(files.InputError, "symbolic link"):
            st.write(os.path.join(d, "link"), {"a": st.Tensor("U8", (1,), [1])})
        self.assertTrue(os.path.islink(os.path.join(d, "link")))
        self.assertEqual(slurp(target), b"old")
        files.atomic_write(target, "new")  # a regular file is replaced
        self.assertEqual(slurp(target), b"new")
        self.assertEqual(sorted(os.listdir(d)), ["link", "target"])  # no temporary left behind


if np is not None:  # the numpy run only: the stdlib run has no vectorized checksum to compare
    class Checksum(unittest.TestCase):
        def test_vectorized_equals_the_byte_loop(self):
            rng = random.Random(3)
            saved = st._CHUNK
            try:
                st._CHUNK, st._cache = 5000, {}  # several chunks, and a chunk's edge inside the data
                for n in (0, 1, 4095, 4096, 4097, 5000, 5001, 12345, 30000):
                    data = bytes(rng.randrange(256) for _ in range(n))
                    h0 = rng.randrange(1 << 64)
                    self.assertEqual(st.fnv1a64(data, h0), st.fnv1a64(data, h0, use_numpy=False), n)
            finally:
                st._CHUNK, st._cache = saved, {}


if __name__ == "__main__":
    if USE_NUMPY and np is None:
        print("test_python_io: numpy is not installed for %s: the numpy run is skipped" % sys.executable)
        sys.exit(77)
    unittest.main(verbosity=2)
