#!/usr/bin/env python3
"""manyadd.load_learned and manyadd.load_constructed on bad model directories (needs torch and hypothesis,
Debian python3-torch and python3-hypothesis, which `x` installs: exit 77, reported as skipped, without).

  - Reproducers: every case of tests/data/loaders/cases.json (a change to a good directory) is refused
    with an InputError that names the file and the field or tensor.
  - Fuzzing: the loaders on mutations of the good directories' files, drawn by hypothesis from the
    mutation families of the C++ fuzz targets (tests/test_fuzz.cpp: flip, overwrite, insert, erase,
    truncate, duplicate a span, replace a number, with the same tokens), on config.json and on the
    weights (the safetensors header as JSON text, the checksum dropped or not, or the whole file).
    Each mutated directory is refused with InputError, or loaded into a model whose tensors are exactly
    the file's and whose forward runs (or refuses the input with InputError); anything else fails.
  - Twin: on mutated config.json files the Python reader (manyadd.strict) accepts exactly what the C++
    accepts (evaluate --problem: exit 2 = refused).
The process runs under an address-space cap (RLIMIT_AS: what the imports and one forward took, plus
1 GiB), so a loader that builds from an unchecked configuration fails here with MemoryError or a torch
allocation error instead of passing slowly; a case that blocks (a FIFO) fails after 60 s.

MANYADD_FUZZ_CASES sets the fuzzing's cases per target (default 120; the twin runs a fifth of them).
"""
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
    import torch
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError as e:
    print("test_python_loaders: %s (Debian: python3-torch, python3-hypothesis): skipped" % e)
    sys.exit(77)

SOURCE = os.environ.get("MANYADD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SOURCE, "python"))
from manyadd import safetensors, strict  # noqa: E402
from manyadd.constructed import load_constructed  # noqa: E402
from manyadd.files import InputError  # noqa: E402
from manyadd.learned import load_learned  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mutations import TOKENS, mutate  # noqa: E402

torch.set_num_threads(1)
LEARNED = os.path.join(SOURCE, "models", "cpu-sa1010-1l4h-d64")
CASES = os.path.join(SOURCE, "tests", "data", "loaders", "cases.json")
FUZZ_CASES = int(os.environ.get("MANYADD_FUZZ_CASES") or 120)
WORKED = ("57+48+96", 4, 2)  # the paper's example, s1 = 4, s2 = 2
ANSWER = "000>750>501>102$"
_TMP = tempfile.mkdtemp(prefix="manyadd_loaders_")
CONSTRUCTED = os.path.join(_TMP, "constructed")  # exported in main()


def tool(env):
    exe = os.environ.get(env)
    if not exe:
        raise AssertionError("%s is not set: it names the built tool (ctest sets it)" % env)
    return exe


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang("a loader ran for 60 s: blocked or unbounded")


signal.signal(signal.SIGALRM, _alarm)


def bounded(f, *args, **kw):
    """f(*args) with a 60 s guard against a reader that blocks."""
    signal.alarm(60)
    try:
        return f(*args, **kw)
    finally:
        signal.alarm(0)


# ---- directories ---------------------------------------------------------------------------------

def copy_dir(src, dst):
    os.makedirs(dst)
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    return dst


def _walk(doc, path):
    """(container, key) of a dotted path (list indices as integers)."""
    keys = path.split(".")
    for k in keys[:-1]:
        doc = doc[int(k)] if isinstance(doc, list) else doc[k]
    last = keys[-1]
    return doc, int(last) if isinstance(doc, list) else last


def apply_case(case, d):
    """Changes the good directory d as the case says (cases.json's "about")."""
    cpath, wpath = os.path.join(d, "config.json"), os.path.join(d, "model.safetensors")
    with open(cpath, encoding="utf-8") as f:
        text = f.read()
    if "set" in case or "delete" in case:
        doc = json.loads(text)
        for path, v in case.get("set", {}).items():
            c, k = _walk(doc, path)
            c[k] = v
        for path in case.get("delete", []):
            c, k = _walk(doc, path)
            del c[k]
        text = json.dumps(doc, indent=2)
    if "replace" in case:
        old, new = case["replace"]
        assert old in text, "case %r: %r is not in config.json" % (case["why"], old)
        text = text.replace(old, new)
    if "text" in case:
        text = case["text"]
    text = case.get("text_prefix", "") + text
    with open(cpath, "wb") as f:
        f.write(text.encode("latin-1" if case.get("latin1") else "utf-8"))
    if case.get("checkpoint") or "tensors" in case:
        tensors, meta = safetensors.read(wpath)
        meta.pop("checksum")
        if case.get("checkpoint"):
            for p in ("adam.m.", "adam.v."):
                tensors.update({p + k: v.copy() for k, v in list(tensors.items()) if not k.startswith("adam.")})
            os.unlink(wpath)
            wpath = os.path.join(d, "checkpoint.safetensors")
        for name, how in case.get("tensors", {}).items():
            v = tensors.pop(name)
            if how == "transpose":
                tensors[name] = np.ascontiguousarray(v.T)
            elif how == "int":
                tensors[name] = v.astype(np.int64)
            elif how.startswith("rename "):
                tensors[how.split()[1]] = v
            else:
                assert how == "drop", how
        safetensors.write(wpath, tensors, meta)
    if "fifo" in case:
        p = os.path.join(d, case["fifo"])
        os.unlink(p)
        os.mkfifo(p)


# ---- the mutation families of tests/test_fuzz.cpp --------------------------------------------------

# kind (0 flip, 1 overwrite, 2 insert, 3 erase, 4 truncate, 5 duplicate, 6 replace a number), pos, len, bytes
MUTATION = st.tuples(st.integers(0, 6), st.integers(0, 2 ** 32 - 1), st.integers(0, 63),
                     st.one_of(st.sampled_from(TOKENS), st.binary(max_size=8)))
MUTATIONS = st.lists(MUTATION, max_size=6)


def mutate_header(file, ms, drop_checksum):
    """The header mutated as JSON text, the length prefix rewritten (test_fuzz.cpp's mutate_header)."""
    if len(file) < 8:
        return mutate(file, ms)
    (hl,) = struct.unpack("<Q", file[:8])
    if hl > len(file) - 8:
        return mutate(file, ms)
    header = file[8:8 + hl]
    if drop_checksum:
        k = header.find(b'"checksum"')
        if k >= 0:
            header = header[:k + 1] + b"C" + header[k + 2:]
    header = mutate(header, ms)
    return struct.pack("<Q", len(header)) + header + file[8 + hl:]


FUZZ = settings(max_examples=FUZZ_CASES, deadline=None, database=None, print_blob=True,
                suppress_health_check=list(HealthCheck))


class Refusals(unittest.TestCase):
    """Every reproducer refused with InputError naming its file; the good directories load."""

    @classmethod
    def setUpClass(cls):
        with open(CASES, encoding="utf-8") as f:
            cls.cases = json.load(f)

    def run_cases(self, kind, base, load):
        self.assertGreater(len(self.cases[kind]), 10)
        for k, case in enumerate(self.cases[kind]):
            with self.subTest(case=case["why"]):
                d = copy_dir(base, os.path.join(_TMP, "%s-case%d" % (kind, k)))
                apply_case(case, d)
                with self.assertRaises(InputError) as cm:
                    bounded(load, d, checkpoint=True) if case.get("checkpoint") else bounded(load, d)
                msg = str(cm.exception)
                self.assertIn(case["file"], msg)
                self.assertIn(case["error"], msg)
                shutil.rmtree(d)

    def test_learned_cases(self):
        self.run_cases("learned", LEARNED, load_learned)

    def test_constructed_cases(self):
        self.run_cases("constructed", CONSTRUCTED, lambda d: load_constructed(d))

    def test_good_directories_load(self):
        self.assertEqual(load_learned(LEARNED).generate("57+48+96"), ANSWER)
        self.assertEqual(load_constructed(CONSTRUCTED).generate(*WORKED), ANSWER)
        # a checkpoint with well-formed moments loads, its moments kept beside the model
        d = copy_dir(LEARNED, os.path.join(_TMP, "checkpoint-good"))
        apply_case({"checkpoint": True}, d)
        m = load_learned(d, checkpoint=True)
        self.assertEqual(m.generate("57+48+96"), ANSWER)
        self.assertEqual(sorted(m.tensors), sorted(p + k for p in ("adam.m.", "adam.v.") for k in m.state_dict()))
        shutil.rmtree(d)

    def test_missing_fields_take_the_cpp_defaults(self):
        # config.json without the fields whose values are the C++ defaults: the same model
        d = copy_dir(LEARNED, os.path.join(_TMP, "defaults"))
        apply_case({"delete": ["model.n_layers", "model.init_std", "model.norm_eps"]}, d)
        self.assertEqual(load_learned(d).generate("57+48+96"), ANSWER)
        shutil.rmtree(d)

    def test_what_evaluate_ignores_is_ignored(self):
        # a train section that is not an object (evaluate reads no field of it), a byte-order mark
        for k, case in enumerate(({"set": {"train": "sa"}}, {"text_prefix": "\ufeff"})):
            d = copy_dir(LEARNED, os.path.join(_TMP, "ignored%d" % k))
            apply_case(case, d)
            self.assertEqual(load_learned(d).generate("57+48+96"), ANSWER)
            shutil.rmtree(d)


class Fuzz(unittest.TestCase):
    """The loaders on mutated files: InputError, or a model that is exactly the file's."""

    @classmethod
    def setUpClass(cls):
        cls.files = {}
        for kind, base in (("learned", LEARNED), ("constructed", CONSTRUCTED)):
            for name in ("config.json", "model.safetensors"):
                with open(os.path.join(base, name), "rb") as f:
                    cls.files[kind, name] = f.read()
        cls.counts = {}

    @classmethod
    def tearDownClass(cls):
        for k, (acc, ref) in sorted(cls.counts.items()):
            print("  fuzz %-32s %4d accepted, %4d refused" % (k, acc, ref))

    def load_mutated(self, kind, name, data):
        d = os.path.join(_TMP, "fuzz-" + kind)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for n in ("config.json", "model.safetensors"):
            with open(os.path.join(d, n), "wb") as f:
                f.write(data if n == name else self.files[kind, n])
        key = "%s %s" % (kind, name)
        acc, ref = self.counts.get(key, (0, 0))
        try:
            model = bounded(load_learned if kind == "learned" else load_constructed, d)
        except InputError:
            self.counts[key] = (acc, ref + 1)
            return
        self.counts[key] = (acc + 1, ref)
        tensors, _ = safetensors.read(os.path.join(d, "model.safetensors"), use_numpy=True)
        if kind == "learned":
            sd = model.state_dict()
            self.assertEqual(sorted(sd), sorted(tensors))
            for k, v in sd.items():
                self.assertTrue(torch.equal(v, torch.from_numpy(np.asarray(tensors[k], dtype=np.float32))), k)
            problem, offsets = "57+48+96", ()
        else:
            shapes = strict.constructed_shapes(model.config)
            self.assertEqual(shapes, {k: tuple(v.shape) for k, v in tensors.items()})
            self.assertTrue(torch.equal(model.embed_token, torch.from_numpy(tensors["embed.token"]).double()))
            self.assertTrue(torch.equal(model.W2, torch.from_numpy(tensors["ffn.W2"]).double()))
            problem, offsets = WORKED[0], WORKED[1:]
        try:  # the forward runs on what was accepted, or refuses the input itself
            bounded(model.generate, problem, *offsets)
        except InputError:
            pass

    @FUZZ
    @given(MUTATIONS)
    def test_learned_config(self, ms):
        self.load_mutated("learned", "config.json", mutate(self.files["learned", "config.json"], ms))

    @FUZZ
    @given(MUTATIONS, st.booleans(), st.booleans())
    def test_learned_weights(self, ms, header_only, drop_checksum):
        f = self.files["learned", "model.safetensors"]
        self.load_mutated("learned", "model.safetensors",
                          mutate_header(f, ms, drop_checksum) if header_only else mutate(f, ms))

    @FUZZ
    @given(MUTATIONS)
    def test_constructed_config(self, ms):
        self.load_mutated("constructed", "config.json", mutate(self.files["constructed", "config.json"], ms))

    @FUZZ
    @given(MUTATIONS, st.booleans(), st.booleans())
    def test_constructed_weights(self, ms, header_only, drop_checksum):
        f = self.files["constructed", "model.safetensors"]
        self.load_mutated("constructed", "model.safetensors",
                          mutate_header(f, ms, drop_checksum) if header_only else mutate(f, ms))


class Twin(unittest.TestCase):
    """manyadd.strict accepts the config.json files the C++ accepts, and only those."""
    counts = [0, 0]

    @classmethod
    def tearDownClass(cls):
        print("  twin: %d accepted by both, %d refused by both" % tuple(cls.counts))

    @settings(max_examples=max(10, FUZZ_CASES // 5), deadline=None, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.sampled_from([1, 6, 6, 6]), st.integers(0, 2 ** 32 - 1), st.integers(0, 63),
                              st.sampled_from(TOKENS + [b'"t5"', b'"layer"', b'"none"', b'"abacus"', b"false",
                                                        b"1e-50", b"0.5", b"1e-7"])), min_size=1, max_size=2))
    def test_config_verdicts_agree(self, ms):
        d = os.path.join(_TMP, "twin")
        shutil.rmtree(d, ignore_errors=True)
        copy_dir(LEARNED, d)
        with open(os.path.join(LEARNED, "config.json"), "rb") as f:
            text = mutate(f.read(), ms)
        with open(os.path.join(d, "config.json"), "wb") as f:
            f.write(text)
        try:
            strict.read_learned_dir(d)
            py = None
        except InputError as e:
            py = str(e)
        r = subprocess.run([tool("EVALUATE"), "--model", d, "--problem", "57+48+96", "--quiet"], capture_output=True,
                           text=True, timeout=120)
        self.assertIn(r.returncode, (0, 1, 2), r.stderr)
        cpp = r.stderr.strip() if r.returncode == 2 else None
        self.assertEqual(py is None, cpp is None, "config.json %r: Python %s, C++ %s" % (
            text[:400], "accepts" if py is None else "refuses (%s)" % py, "accepts" if cpp is None else "refuses (%s)" % cpp))
        self.counts[0 if py is None else 1] += 1


def main():
    try:
        subprocess.run([tool("VERIFY_CONSTRUCTION"), "--problem", WORKED[0], "--s1", str(WORKED[1]), "--s2",
                        str(WORKED[2]), "--p1", "3", "--p2", "3", "--no-certify", "--export", CONSTRUCTED],
                       check=True, capture_output=True, timeout=300)
        # one load and forward of each kind before the cap: torch's own first-use allocations
        load_learned(LEARNED).generate("57+48+96")
        load_constructed(CONSTRUCTED).generate(*WORKED)
        with open("/proc/self/status") as f:
            vm = [int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")][0]
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
        print("address space capped at %.2f GiB (imports and first forward: %.2f GiB)" % ((vm + (1 << 30)) / 2 ** 30,
                                                                                       vm / 2 ** 30))
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(_TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
