#!/usr/bin/env python3
"""python/manyadd's torch modules against the C++ tools (needs PyTorch: exit 77, reported by ctest as
skipped, where `import torch` fails; Debian: python3-torch, which `x` installs).

load_learned (manyadd/learned.py):
  - logits on the committed models/ (1 and 2 layers) and on freshly trained tiny models of every
    position mode (FIRE with either threshold and with its threshold inside the sequence, RoPE), input
    injection and the architecture options equal `evaluate --problem P --json`'s C++ logits; the teacher-forced and greedy
    answers are the C++ ones; model.example() builds the tokens and IDs evaluate used;
  - per-sample attention from the hooks, averaged over the same TA samples (manyadd.format's sampler),
    equals dump_attention's averaged maps;
  - bench/torch_twin.py check (the twin's forward and one AdamW step against the C++ trainer) agrees;
  - config.json fields or switch values it does not implement are refused; hooks and padded batches.
load_constructed (manyadd/constructed.py):
  - on the paper's worked example (57+48+96, s1 = 4, s2 = 2, P1 = P2 = 3) its greedy output is the
    C++ engines' (verify_construction: structured, dense, dense-float32 exact), its residual stream after
    the layer equals the dense engine's `--dump residual`, and bench/load_constructed.py agrees;
  - it reproduces a counterexample of the paper's dimension formula (the C++ confirms it with dense);
  - its attention pattern equals dump_attention --constructed's map.

Tolerances (why each is what it is):
  fp32 against fp32 (learned logits and attention): the C++ and torch run the same operations in fp32
  in different summation orders (Eigen's GEMM blocking and sequential loops vs torch's kernels), so
  each lies within its own rounding error of the exact value, and neither is closer. The exact value is
  taken as the same torch module run in float64 (rounding 1e-16, negligible); the twin's own fp32 error
  e = max |twin32 - twin64| is measured on the same input, and the C++ must satisfy
      max |cpp - twin64| <= tol = 4 e + 8 u max(1, max |value|)   (so |cpp - twin32| <= tol + e),
  u = 2^-24: "the C++ fp32 error is an fp32 error of this computation": of the size of another fp32
  program's, with a factor 4 for the different orders (the measured ratio |cpp - twin64| / e is 0.5-1.7
  over the cases below) and a floor of a few ulps of the largest value (one rounding of the last product
  alone may differ by an ulp). The errors grow with depth and length through the norms and the softmax
  (measured e: 1.5e-7 to 6e-5 of the largest logit, 2 layers and 575 tokens the largest), so no fixed
  fraction of the logit scale such as 1e-5 bounds them. What the test must catch moves logits far more:
  an eps of 1e-5 instead of 1e-6 by 4x the tolerance, the exact gelu instead of the tanh one by 30x,
  a 1/d_head score scale or swapped position levels by 10^4-10^5x, an ID off by one by 6000x (measured
  on 57+48+96 with the 1-layer 4-head model). A stored attention map also carries its float32
  rounding (<= 2^-25 for values in [0, 1]: + u).
  float64 against float64 (constructed model, both double): each score is a dot product of <= 2 P + 1
  terms of magnitude <= lambda P (~50), each head output a softmax average, the FFN multiplies by
  weights <= ~20 over 82 units: the rounding of either program stays below ~1e-11 on values of order
  10; tolerance 1e-9 (measured 7e-15). The constructed map from dump_attention is stored as float32:
  2^-24 + 1e-12.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy
    import torch
except ImportError:
    print("test_python_models: PyTorch is not installed (Debian: python3-torch): skipped")
    sys.exit(77)

SOURCE = os.environ.get("MANYADD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SOURCE, "python"))
from manyadd import format as fmt  # noqa: E402
from manyadd import safetensors  # noqa: E402
from manyadd.constructed import load_constructed  # noqa: E402
from manyadd.files import InputError  # noqa: E402
from manyadd.learned import load_learned  # noqa: E402

torch.set_num_threads(1)
U = 2.0 ** -24
MODELS = [os.path.join(SOURCE, "models", d) for d in ("cpu-sa1010-1l4h-d64", "cpu-sa1010-2l2h-d64", "cpu-sa1010-1l2h-d64",
                                                    "cpu-sa1010-1l4h-d64-coupled-rel-far",
                                                    "cpu-sa1020-1l4h-d64-coupled-rel-far",
                                                    "cpu-sa1010-1l4h-d64-coupled-rel-farnorm",
                                                    "cpu-sa1010-1l4h-d64-coupled-rel-farmask")]
MEDIUM = "1234+56+7890+12+345+6789+1+23+456"  # 9 operands of up to 4 digits, N = 114
LONG = "12345678901234567890+98765432109876543210+55555555555555555555+1+22+333+4444+55555+666666+7777777" \
       "+88888888+999999999"


def tool(env, *args, ok=(0,)):
    exe = os.environ.get(env)
    if not exe:
        raise AssertionError("%s is not set: it names the built tool (ctest sets it)" % env)
    r = subprocess.run([exe] + [str(a) for a in args], capture_output=True, text=True, timeout=600)
    if r.returncode not in ok:
        raise AssertionError("%s %s: exit %d\n%s%s" % (exe, " ".join(map(str, args)), r.returncode, r.stdout, r.stderr))
    return r


def fp32_check(test, cpp, t32, t64, what, stored=0.0):
    """The fp32 rule of the module doc (stored: the rounding of a value the C++ stored in a narrower
    type); returns the tolerance."""
    cpp, t32, t64 = (torch.as_tensor(x, dtype=torch.float64) for x in (cpp, t32, t64))
    e = float((t32 - t64).abs().max())
    scale = max(1.0, float(cpp.abs().max()))
    tol = 4 * e + 8 * U * scale + stored
    e_cpp, d = float((cpp - t64).abs().max()), float((cpp - t32).abs().max())
    test.assertLessEqual(e_cpp, tol, "%s: |C++ - twin64| %.3e > tolerance %.3e (twin32 error %.3e)" % (what, e_cpp, tol, e))
    # implied by the line above and the triangle inequality; checked to name the fp32 twin in a failure
    test.assertLessEqual(d, tol + e, "%s: |C++ - twin32| %.3e > tolerance %.3e" % (what, d, tol + e))
    print("  %-58s scale %6.2f  |cpp-t32| %.2e  |cpp-t64| %.2e  twin fp32 error %.2e  tol %.2e" % (
        what, scale, d, e_cpp, e, tol))
    return tol


def same_predictions(test, pred, want, logits, tol, what):
    """Argmax strings equal, except where the top two logits are within 2 tol (a legitimate flip)."""
    for k, (p, w) in enumerate(zip(pred, want)):
        if p != w:
            top = torch.topk(torch.as_tensor(logits[k], dtype=torch.float64), 2).values
            test.assertLess(float(top[0] - top[1]), 2 * tol, "%s: prediction %d is %r, C++ %r" % (what, k, p, w))
    test.assertEqual(len(pred), len(want))


class TempDir(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="manyadd_models_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class LearnedLogits(TempDir):
    def compare(self, model_dir, problem, s1=1, s2=1, greedy=True):
        out = os.path.join(self.dir, "p.json")
        tool("EVALUATE", "--model", model_dir, "--problem", problem, "--s1", s1, "--s2", s2, "--json", out, ok=(0, 1))
        with open(out) as f:
            ref = json.load(f)
        m32, m64 = load_learned(model_dir), load_learned(model_dir, dtype=torch.float64)
        ex = m32.example(problem, s1, s2)
        # the format twin builds what evaluate fed the C++ model
        self.assertEqual(fmt.decode(ex.tokens[0]), ref["tokens"])
        for lv, p in enumerate(ex.pos):
            self.assertEqual(p[0].tolist(), ref["pos%d" % (lv + 1)])
        with torch.no_grad():
            z32, z64 = m32(ex.tokens, ex.pos)[0], m64(ex.tokens, ex.pos)[0]
        eq = ex.shape.eq_index
        what = "%s %s (s1=%d s2=%d, N=%d)" % (os.path.basename(model_dir), problem[:24], s1, s2, ex.shape.N)
        tol = fp32_check(self, ref["logits_from_eq"], z32[eq:], z64[eq:], what)
        same_predictions(self, fmt.decode(z32[eq:].argmax(-1)), ref["teacher"], z32[eq:], tol, what)
        if greedy:
            self.assertEqual(m32.generate(problem, s1, s2), ref["greedy"], what)

    def test_committed_models(self):
        ta = "+".join(fmt.sample_TA(fmt.Rng(fmt.cell_seed(12345, 10, 10)), 10, 10))
        for d in MODELS:
            self.compare(d, "57+48+96")
            self.compare(d, LONG, 3, 5, greedy=False)  # 12 operands of up to 20 digits, N = 575, offsets 3, 5
            self.compare(d, ta, 7, 2)

    def test_fresh_models_every_pos_mode(self):
        # as learn/python/check_reference.sh: a 2-layer model trained 20 steps, its weights far from init
        for mode in fmt.POS_MODES:
            run = os.path.join(self.dir, mode)
            mp1 = 40 if mode == "absolute" else 6
            tool("TRAIN", "--out", run, "--pos-mode", mode, "--train-n", 2, "--train-m", 3, "--train-size", 200,
                 "--max-pos1", mp1, "--max-pos2", 6, "--n-layers", 2, "--d-model", 16, "--d-head", 4, "--d-ff", 16,
                 "--batch", 8, "--steps", 20, "--lr", 0.01, "--eval-every", 0, "--eval-samples", 2)
            self.compare(run, "57+8+96", greedy=False)  # barely trained: greedy may run into near-ties
            s1 = 2 if mode != "none" else 1
            self.compare(run, "5+38", s1, 2 if mode == "coupled" else 1, greedy=False)

    def test_fresh_models_pos_codes(self):
        # frozen position codes (model.pos_codes): the tables are in model.safetensors, the forward is the
        # usual one; the twin reads them with no code logic and gives the C++ logits; the frozen tables
        # are the codes after training (hypercube: +-scale in the level's block, zero elsewhere)
        for codes in ("learned,shuffled", "hypercube", "frozen"):
            run = os.path.join(self.dir, codes.replace(",", "-"))
            tool("TRAIN", "--out", run, "--pos-codes", codes, "--pos-code-scale", 0.5, "--train-n", 2, "--train-m", 3,
                 "--train-size", 200, "--max-pos1", 6, "--max-pos2", 6, "--n-layers", 2, "--d-model", 16,
                 "--d-head", 4, "--d-ff", 16, "--batch", 8, "--steps", 20, "--lr", 0.01, "--eval-every", 0,
                 "--eval-samples", 2)
            self.compare(run, "57+8+96", greedy=False)
            m = load_learned(run)
            self.assertEqual(m.cfg.pos_codes, tuple(codes.split(",") * (2 if "," not in codes else 1)))
            if codes == "hypercube":  # 3 bits per level (2^3 >= 7): level 1 in dims 0-5, level 2 in 6-11
                for lv in range(2):
                    w = m.pos_emb[lv].weight.detach()
                    self.assertTrue(torch.all(w[0] == 0))
                    blk = w[1:, 6 * lv:6 * lv + 6]
                    self.assertTrue(torch.all(blk.abs() == 0.5))
                    rest = torch.cat([w[1:, :6 * lv], w[1:, 6 * lv + 6:]], 1)
                    self.assertTrue(torch.all(rest == 0))

    def test_fresh_models_other_tasks(self):
        # the other tasks' models (format.py's task writers, coupled3's third table, the '*' token), trained
        # 20 steps as above; evaluate --problem feeds the C++ model what the twin builds
        for task, mode, problem, s in (("parity", "digits", "0101101", 3), ("multiplication", "coupled3", "37*92", 2),
                                       ("multiplication-noscratch", "digits", "37*92", 2)):
            run = os.path.join(self.dir, task)
            tool("TRAIN", "--out", run, "--task", task, "--pos-mode", mode, "--train-n", 3, "--train-m", 2,
                 "--train-size", 200, "--max-pos1", 12, "--max-pos2", 6, "--max-pos3", 8, "--n-layers", 2,
                 "--d-model", 16, "--d-head", 4, "--d-ff", 16, "--batch", 8, "--steps", 20, "--lr", 0.01,
                 "--eval-every", 0, "--eval-samples", 2)
            self.compare(run, problem, greedy=False)
            self.compare(run, problem, s, s if mode == "coupled3" else 1, greedy=False)


    def test_fresh_models_fire_rope_injection(self):
        # FIRE (Li et al.; both thresholds), RoPE, input injection (McLeish et al.), 2 layers trained 20 steps
        variants = {"fire": ["--pos-mode", "fire"], "fire_min": ["--pos-mode", "fire", "--fire-threshold", "min"],
                    "rope": ["--pos-mode", "rope"], "injection": ["--input-injection", "true"],
                    "injection_rope": ["--pos-mode", "rope", "--input-injection", "true"],
                    "coupled_rel": ["--pos-mode", "coupled_rel"],
                    "coupled_rel_w0": ["--pos-mode", "coupled_rel", "--rel-window", "0", "--input-injection", "true"],
                    "coupled_rel_far": ["--pos-mode", "coupled_rel", "--rel-window", "1", "--rel-far", "true"],
                    "coupled_rel_far_norm": ["--pos-mode", "coupled_rel", "--rel-window", "1", "--rel-far", "true",
                                             "--rel-far-norm", "true"],
                    "coupled_rel_far_mask": ["--pos-mode", "coupled_rel", "--rel-window", "1", "--rel-far-mask", "true"],
                    "coupled_rel_positional": ["--pos-mode", "coupled_rel", "--rel-window", "1", "--rel-far-mask", "true",
                                               "--attn-scale", "positional"],
                    "coupled_rel_positional_value": ["--pos-mode", "coupled_rel", "--rel-window", "1", "--rel-far-mask",
                                                     "true", "--attn-scale", "positional", "--rel-value", "true"],
                    "coupled_rel_far_value": ["--pos-mode", "coupled_rel", "--rel-window", "1", "--rel-far", "true",
                                              "--rel-value", "true"]}
        for name, flags in variants.items():
            run = os.path.join(self.dir, name)
            tool("TRAIN", "--out", run, "--train-n", 2, "--train-m", 3, "--train-size", 200, "--max-pos1", 12,
                 "--max-pos2", 12, "--n-layers", 2, "--d-model", 16, "--d-head", 4, "--d-ff", 16, "--batch", 8,
                 "--steps", 20, "--lr", 0.01, "--eval-every", 0, "--eval-samples", 2, *flags)
            self.compare(run, "57+8+96", greedy=False)
            self.compare(run, MEDIUM, greedy=False)  # beyond every training length
        for name, nb in (("coupled_rel", 5), ("coupled_rel_w0", 1), ("coupled_rel_far", 4), ("coupled_rel_far_norm", 4),
                         ("coupled_rel_far_mask", 3), ("coupled_rel_positional", 3), ("coupled_rel_positional_value", 3),
                         ("coupled_rel_far_value", 4)):
            run = os.path.join(self.dir, name)
            self.assertEqual(tuple(load_learned(run).rel_bias.weight.shape), (2, 4, 2, nb))
            self.assertEqual(len(load_learned(run).pos_emb), 0)  # no table
            self.compare(run, "5+38", 3, 2)  # offsets, and greedy decoding: the C++ reads the cached keys' IDs
            # gains of a few units (training moved them little in 20 steps): the bias decides the patterns
            path = os.path.join(run, "model.safetensors")
            tensors, meta = safetensors.read(path)
            g = tensors["rel_bias.weight"]
            tensors["rel_bias.weight"] = (numpy.random.default_rng(7).standard_normal(g.shape) * 3).astype(g.dtype)
            if "rel_value" in name:  # relative values of the values' order (trained 20 steps from 0: small)
                r = tensors["rel_value.weight"]
                self.assertEqual(r.shape, (2, 4, 2, nb, 4))
                tensors["rel_value.weight"] = numpy.random.default_rng(8).standard_normal(r.shape).astype(r.dtype)
            safetensors.write(path, tensors, {k: v for k, v in meta.items() if k != "checksum"})
            self.compare(run, MEDIUM, 2, 3, greedy=False)
            self.compare(run, "5+38", 3, 2)
        # The trained FIRE models keep L near its initial 256, beyond these sequences: every row has one
        # normalizer kind. With L = 9.61 (L_sqrt 3.1) and c = 0.7 written into the file, rows below and above
        # the threshold both occur (the C++ reads the edited file, checksum and all).
        for name in ("fire", "fire_min"):
            path = os.path.join(self.dir, name, "model.safetensors")
            tensors, meta = safetensors.read(path)
            for k, v in (("fire.L_sqrt", 3.1), ("fire.c", 0.7)):
                tensors[k] = tensors[k].copy()
                tensors[k][...] = v  # stays float32
            safetensors.write(path, tensors, {k: v for k, v in meta.items() if k != "checksum"})
            self.compare(os.path.join(self.dir, name), "57+8+96", greedy=False)
            self.compare(os.path.join(self.dir, name), MEDIUM, greedy=False)

    def test_paper_options(self):
        # The authors' architecture (unscaled attention, T5 init, readout tied to the token table with
        # d_model^-1/2, final LayerNorm), trained 20 steps on the CPU in bf16 as the paper's recipe
        # trains (the saved weights are the fp32 masters, evaluated in fp32 by both), and one option at a
        # time in fp32: the logits equal evaluate's, and the hooks hold the final LayerNorm's output.
        variants = {"paper": ["--attn-scale", "none", "--init", "t5", "--tie-readout", "true", "--final-norm",
                              "layer", "--precision", "bf16"],
                    "attn_none": ["--attn-scale", "none"], "tied": ["--tie-readout", "true"],
                    "layernorm": ["--final-norm", "layer"]}
        for name, flags in variants.items():
            run = os.path.join(self.dir, name)
            tool("TRAIN", "--out", run, "--train-n", 2, "--train-m", 3, "--train-size", 200, "--max-pos1", 6,
                 "--max-pos2", 6, "--n-layers", 2, "--d-model", 16, "--d-head", 4, "--d-ff", 16, "--batch", 8,
                 "--steps", 20, "--lr", 0.01, "--eval-every", 0, "--eval-samples", 2, *flags)
            self.compare(run, "57+8+96", greedy=False)
            self.compare(run, "5+38", 2, 2, greedy=False)
        m = load_learned(os.path.join(self.dir, "paper"))
        self.assertIsNone(m.lm_head)
        self.assertIn("final_norm.bias", m.state_dict())
        ex = m.example("5+38", 2, 2)
        with torch.no_grad():
            logits, cache = m.run_with_cache(ex.tokens, ex.pos)
            xf = cache["ln_final.hook_normalized"]
            ln = torch.nn.functional.layer_norm(cache["blocks.1.hook_resid_post"], (16,), m.final_norm.weight,
                                                m.final_norm.bias, m.cfg.norm_eps)  # torch's own LayerNorm
            self.assertLess(float((xf - ln).abs().max()), 1e-5 * max(1.0, float(ln.abs().max())))
            want = (xf / math.sqrt(16)) @ m.tok_emb.weight.t()
            self.assertLess(float((logits - want).abs().max()), 1e-5 * max(1.0, float(want.abs().max())))


class LearnedAttention(TempDir):
    def test_hooks_equal_dump_attention(self):
        n, m, K = 5, 5, 20
        for d in MODELS[:2]:
            out = os.path.join(self.dir, os.path.basename(d))
            tool("DUMP_ATTENTION", "--model", d, "--n", n, "--m", m, "--samples", K, "--out", out)
            maps, meta = safetensors.read(os.path.join(out, "attention.safetensors"))
            # the same instances: evaluate/dump_attention's per-cell seed and sampler (default seed 12345)
            rng = fmt.Rng(fmt.cell_seed(12345, n, m))
            problems = [fmt.sample_TA(rng, n, m) for _ in range(K)]
            m32, m64 = load_learned(d), load_learned(d, dtype=torch.float64)
            exs = [m32.example(p) for p in problems]
            self.assertEqual(fmt.decode(exs[0].tokens[0]), meta["example_tokens"])
            tokens = torch.cat([e.tokens for e in exs])
            pos = [torch.cat([e.pos[lv] for e in exs]) for lv in range(m32.cfg.levels)]
            with torch.no_grad():
                _, c32 = m32.run_with_cache(tokens, pos, names_filter="hook_pattern")
                _, c64 = m64.run_with_cache(tokens, pos, names_filter="hook_pattern")
            for l in range(m32.cfg.n_layers):
                name = "blocks.%d.attn.hook_pattern" % l
                self.assertEqual(tuple(c32[name].shape), (K, m32.cfg.n_heads, exs[0].shape.N, exs[0].shape.N))
                a32 = c32[name].double().mean(0)  # averaged the C++ way: the mean of per-sample maps
                a64 = c64[name].mean(0)
                cpp = torch.stack([torch.from_numpy(maps["layers.%d.head.%d" % (l, h)]).double()
                                   for h in range(m32.cfg.n_heads)])
                fp32_check(self, cpp, a32, a64, "%s layer %d attention, TA(%d, %d) x %d" % (
                    os.path.basename(d), l, n, m, K), stored=U)  # + u: the stored map is float32


    def test_hooks_equal_dump_attention_fire_rope(self):
        # FIRE's bias and RoPE's rotation in the pattern: fresh 2-layer models (as above), TA(2, 3) x 10
        n, m, K = 2, 3, 10
        for mode in ("fire", "rope"):
            run, out = os.path.join(self.dir, mode), os.path.join(self.dir, mode + "_attn")
            tool("TRAIN", "--out", run, "--pos-mode", mode, "--train-n", 2, "--train-m", 3, "--train-size", 200,
                 "--n-layers", 2, "--d-model", 16, "--d-head", 4, "--d-ff", 16, "--batch", 8, "--steps", 20,
                 "--lr", 0.01, "--eval-every", 0, "--eval-samples", 2)
            tool("DUMP_ATTENTION", "--model", run, "--n", n, "--m", m, "--samples", K, "--out", out)
            maps, _ = safetensors.read(os.path.join(out, "attention.safetensors"))
            rng = fmt.Rng(fmt.cell_seed(12345, n, m))
            problems = [fmt.sample_TA(rng, n, m) for _ in range(K)]
            m32, m64 = load_learned(run), load_learned(run, dtype=torch.float64)
            tokens = torch.cat([m32.example(p).tokens for p in problems])
            with torch.no_grad():
                _, c32 = m32.run_with_cache(tokens, None, names_filter="hook_pattern")
                _, c64 = m64.run_with_cache(tokens, None, names_filter="hook_pattern")
            for l in range(2):
                name = "blocks.%d.attn.hook_pattern" % l
                cpp = torch.stack([torch.from_numpy(maps["layers.%d.head.%d" % (l, h)]).double() for h in range(4)])
                fp32_check(self, cpp, c32[name].double().mean(0), c64[name].mean(0),
                           "%s layer %d attention, TA(%d, %d) x %d" % (mode, l, n, m, K), stored=U)


class PositionCodes(TempDir):
    def test_diagnosis_of_the_committed_model(self):
        # manyadd.codes on models/cpu-sa1010-1l4h-d64: the aliasing README.md states (level 2's cosine at
        # ID distance 10: mean 0.64, max 0.95), the first wrong prediction of evaluate's first TA(10, 14)
        # sample (B_3's digit, IDs (2, 4)) with the aliased key (3, 14) among head 1's top keys, and the figure
        from manyadd import codes
        m = load_learned(MODELS[0])
        by = codes.similarity_by_distance(codes.code_similarity(m, 2))
        self.assertAlmostEqual(by[10][0], 0.64, delta=0.005)
        self.assertAlmostEqual(by[10][1], 0.95, delta=0.005)
        sim = codes.code_similarity(m, 1)
        self.assertTrue(torch.allclose(torch.diagonal(sim), torch.ones(40, dtype=torch.float64)))
        sc = codes.position_scores(m, 2)
        self.assertEqual(tuple(sc.shape), (4, 40, 40))
        problem = "+".join(fmt.sample_TA(fmt.Rng(fmt.cell_seed(12345, 10, 14)), 10, 14))
        q, heads = codes.attended_keys(m, problem)
        self.assertEqual(q["ids"], (2, 4))
        self.assertNotEqual(q["target"], q["predicted"])
        h1 = [kid for _, _, _, kid, _ in heads[1][2]]
        self.assertIn((3, 3), h1)
        self.assertIn((3, 14), h1)
        self.assertTrue(any(ok for *_, ok in heads[1][2]))
        self.assertEqual(codes.attended_keys(m, "57+48+96"), (None, []))  # solved: nothing wrong
        out = os.path.join(self.dir, "codes.png")
        try:
            import matplotlib  # noqa: F401
            args = [MODELS[0], "-o", out, "--dpi", 40]
        except ImportError:
            args = [MODELS[0], "--no-figure"]
        self.assertEqual(codes.main([str(a) for a in args]), 0)
        if "--no-figure" not in args:
            with open(out, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertEqual(codes.main([MODELS[0], "--cell", "0", "3", "--no-figure"]), 2)
        self.assertEqual(codes.main([os.path.join(self.dir, "nothing"), "--no-figure"]), 2)


class Constructed(TempDir):
    def test_worked_example(self):
        out, rep = os.path.join(self.dir, "worked"), os.path.join(self.dir, "worked.json")
        tool("VERIFY_CONSTRUCTION", "--problem", "57+48+96", "--s1", 4, "--s2", 2, "--p1", 3, "--p2", 3,
             "--engine", "all", "--dump", "residual", "--json", rep, "--export", out)
        with open(rep) as f:
            r = json.load(f)
        # the C++ engines (exit 0): every engine's greedy answer is the correct response
        self.assertEqual(r["samples"]["checked"], 1)
        self.assertEqual(r["samples"]["exact"], 1)
        self.assertTrue(r["engines_agree"])
        self.assertGreaterEqual(set(r["engines"]), {"structured", "dense", "dense-float32"})
        model = load_constructed(out)
        self.assertEqual(model.generate("57+48+96", 4, 2), "000>750>501>102$")
        self.assertEqual(model.teacher_forced("57+48+96", 4, 2), "000>750>501>102$")
        ex = model.example("57+48+96", 4, 2)
        res = r["residual"]
        self.assertEqual(fmt.decode(ex.tokens[0]), "".join(res["tokens"]))
        self.assertEqual(ex.pos[0][0].tolist(), res["p1"])
        self.assertEqual(ex.pos[1][0].tolist(), res["p2"])
        with torch.no_grad():
            _, cache = model.run_with_cache(ex.tokens, ex.pos)
        x1 = cache["blocks.0.hook_resid_post"][0]
        self.assertEqual(set(res["rows"]), set(model.residual_dims))
        worst = max(float((x1[:, model.dim(k)] - torch.tensor(v, dtype=torch.float64)).abs().max())
                    for k, v in res["rows"].items())
        print("  worked example: residual after the layer vs the dense engine's dump, max |diff| %.2e (tol 1e-9)" % worst)
        self.assertLessEqual(worst, 1e-9)
        # the thin command line over the module
        cli = subprocess.run([sys.executable, os.path.join(SOURCE, "bench", "load_constructed.py"), out, "57+48+96",
                              "--s1", "4", "--s2", "2", "--greedy"], capture_output=True, text=True, timeout=300)
        self.assertEqual(cli.returncode, 0, cli.stdout + cli.stderr)
        self.assertIn("greedy: 000>750>501>102$   (exact)", cli.stdout)
        bad = subprocess.run([sys.executable, os.path.join(SOURCE, "bench", "load_constructed.py"), out, "57+48+96",
                              "--s1", "9"], capture_output=True, text=True, timeout=300)
        self.assertEqual(bad.returncode, 2, bad.stdout + bad.stderr)

    def test_counterexample_of_the_paper_dims(self):
        out, rep = os.path.join(self.dir, "paper"), os.path.join(self.dir, "paper.json")
        tool("VERIFY_CONSTRUCTION", "--n", 2, "--m", 3, "--dims", "paper", "--json", rep, "--export", out, ok=(1,))
        with open(rep) as f:
            ce = json.load(f)["counterexample"]
        model = load_constructed(out)
        pred = model.teacher_forced(ce["problem"], ce["s1"], ce["s2"])
        eq = model.example(ce["problem"], ce["s1"], ce["s2"]).shape.eq_index
        k = ce["position"] - 1 - eq  # "token 16 predicts": the prediction made at 1-based token 16
        self.assertEqual(pred[k], ce["got"])
        self.assertNotEqual(pred[k], ce["expected"])

    def test_pattern_equals_dump_attention(self):
        out, exp = os.path.join(self.dir, "attn"), os.path.join(self.dir, "c33")
        tool("DUMP_ATTENTION", "--constructed", "--n", 3, "--m", 3, "--samples", 1, "--out", out)
        # dump_attention --constructed builds TA(3, 3) with minimal padding, dims ours, the default lambda
        tool("VERIFY_CONSTRUCTION", "--n", 3, "--m", 3, "--padding", "minimal", "--no-certify", "--export", exp)
        maps, meta = safetensors.read(os.path.join(out, "attention.safetensors"))
        model = load_constructed(exp)
        self.assertEqual(str(model.config["lambdas"][0]), meta["lambda"])
        ex = model.example(fmt.parse_sequence(meta["example_tokens"])[2])
        self.assertEqual(fmt.decode(ex.tokens[0]), meta["example_tokens"])
        with torch.no_grad():
            _, cache = model.run_with_cache(ex.tokens, ex.pos, names_filter=["blocks.0.attn.hook_pattern"])
        a = cache["blocks.0.attn.hook_pattern"][0]
        for h in range(4):
            diff = float((a[h] - torch.from_numpy(maps["layers.0.head.%d" % h]).double()).abs().max())
            self.assertLessEqual(diff, U + 1e-12, "head %d" % (h + 1))


PAPER_FLAGS = ["--attn-scale", "none", "--init", "t5", "--tie-readout", "true", "--final-norm", "layer",
               "--warmup-from-zero", "true"]


class TorchTwin(TempDir):
    def twin(self, *args):
        r = subprocess.run([sys.executable, os.path.join(SOURCE, "bench", "torch_twin.py")] + [str(a) for a in args],
                           capture_output=True, text=True, timeout=300)
        print("  " + r.stdout.strip().replace("\n", "\n  "))
        return r

    def test_one_training_step(self):
        # this project's architecture, and the authors' (every T5 option, warm-up from 0: step 10 of 20 is
        # past the warm-up either way, so the schedule's t - 1 shows in lr)
        for name, flags in (("defaults", []), ("paper", PAPER_FLAGS)):
            with self.subTest(name):
                prev, nxt = os.path.join(self.dir, name + "_prev"), os.path.join(self.dir, name + "_next")
                tool("TRAIN", "--out", prev, "--train-n", 2, "--train-m", 3, "--train-size", 200, "--max-pos1", 6,
                     "--max-pos2", 6, "--n-layers", 2, "--d-model", 16, "--d-head", 4, "--d-ff", 16, "--batch", 8,
                     "--steps", 20, "--lr", 0.01, "--eval-every", 0, "--eval-samples", 2, "--stop-after", 9, *flags)
                shutil.copytree(prev, nxt)
                tool("TRAIN", "--out", nxt, "--resume", "--stop-after", 10)
                b, ref = os.path.join(self.dir, name + "_b.bin"), os.path.join(self.dir, name + "_ref.safetensors")
                tool("DUMP_BATCHES", "--run", prev, "--from", 10, "--steps", 1, "--out", b, "--reference", ref)
                r = self.twin("check", prev, nxt, b, ref)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_bench_at_toy_size(self):
        # The benchmark's code path on the CPU at toy size (its numbers mean nothing here): every variant
        # this torch has runs on dump_batches' batches, and the ratio against a bench_cuda_train JSON of the
        # Google Benchmark format is printed and recorded.
        run = os.path.join(self.dir, "run")
        tool("TRAIN", "--out", run, "--train-n", 2, "--train-m", 3, "--train-size", 200, "--max-pos1", 6,
             "--max-pos2", 6, "--n-layers", 1, "--d-model", 16, "--d-head", 4, "--d-ff", 16, "--batch", 8,
             "--steps", 20, "--eval-every", 0, "--eval-samples", 2, "--stop-after", 1, *PAPER_FLAGS)
        b, ours, out = (os.path.join(self.dir, n) for n in ("b.bin", "ours.json", "out.json"))
        tool("DUMP_BATCHES", "--run", run, "--from", 2, "--steps", 3, "--out", b)
        with open(ours, "w") as f:  # the fields torch_twin reads from bench_cuda_train --benchmark_out
            # the names as bench_cuda_train --run /abs/path writes them (seen on an H100, 2026-11-27)
            json.dump({"benchmarks": [{"name": "cuda_train/%s/fp32/min_time:5.000/real_time" % run, "tokens/s": 1000.0},
                                      {"name": "cuda_train/%s/bf16/min_time:5.000/real_time" % run, "tokens/s": 3000.0}]}, f)
        r = self.twin("bench", run, b, "--device", "cpu", "--steps", 2, "--warmup", 1, "--json", out, "--ours", ours)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(out) as f:
            res = json.load(f)
        for v in ("eager", "eager-bf16"):
            self.assertGreater(res[v]["tokens_per_s"], 0, v)
            self.assertEqual(res[v]["tokens"] % 1, 0)
        self.assertAlmostEqual(res["ratio_fp32"], 1000.0 / max(res[v]["tokens_per_s"] for v in ("eager", "compile")
                                                              if isinstance(res.get(v), dict)))
        self.assertIn("ratio bf16", r.stdout)


class LearnedApi(TempDir):
    def model_copy(self, edit):
        d = os.path.join(self.dir, "m")
        shutil.copytree(MODELS[0], d, dirs_exist_ok=True)
        with open(os.path.join(MODELS[0], "config.json")) as f:
            cfg = json.load(f)
        edit(cfg)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        return d

    def test_refuses_what_it_does_not_implement(self):
        cases = [
            (lambda c: c["model"].update(attn_scale="cosine"), "attn_scale"),
            (lambda c: c["model"].update(tie_readout="yes"), "tie_readout"),
            (lambda c: c["model"].update(final_norm="batch"), "final_norm"),
            # a tied readout has no lm_head: the file's lm_head.weight is then a tensor the config does not use
            (lambda c: c["model"].update(tie_readout=True), "'lm_head.weight' is not part of the model"),
            (lambda c: c["model"].update(final_norm="layer"), "'final_norm.bias' (shape [64]) is missing"),
            (lambda c: c["model"].update(rope=True), "unknown field 'rope'"),
            (lambda c: c["model"].update(pos_mode="alibi"), "pos_mode"),
            (lambda c: c["model"].update(fire_width=32), "applies to pos_mode fire only"),
            (lambda c: c["model"].update(input_injection="yes"), "input_injection"),
            (lambda c: c["model"].update(d_model=32), "shape"),
            # an absent field takes the C++ default (max_pos1 20: a table of 21 rows, not the file's 41)
            (lambda c: c["model"].pop("max_pos1"), "pos_emb.0.weight"),
            (lambda c: c["train"].update(precision="fp8"), "precision"),
            (lambda c: c["model"].update(pos_codes="onehot"), "pos_codes"),
            (lambda c: c["model"].update(pos_codes="learned,frozen,frozen"), "pos_codes"),
            (lambda c: c["model"].update(pos_codes=["learned"]), "pos_codes"),
            (lambda c: c["model"].update(pos_codes="frozen", pos_code_scale=0), "pos_code_scale"),
            (lambda c: c["model"].update(rel_window=2), "applies to pos_mode coupled_rel only"),
            (lambda c: c["model"].update(rel_far=False), "applies to pos_mode coupled_rel only"),
            (lambda c: c["model"].update(pos_mode="coupled_rel", rel_far=1), "rel_far"),
            (lambda c: c["model"].update(pos_mode="coupled_rel", rel_far_mask="yes"), "rel_far_mask"),
            (lambda c: c["model"].update(pos_mode="coupled_rel", rel_far=True, rel_far_mask=True), "exclude each other"),
            # coupled_rel has no tables: the committed model's pos_emb.* are then tensors it does not use
            (lambda c: c["model"].update(pos_mode="coupled_rel"), "is not part of the model"),
            (lambda c: c["model"].update(pos_mode="coupled_rel", rel_window=65), "rel_window"),
        ]
        for edit, msg in cases:
            with self.subTest(msg=msg):
                with self.assertRaises(InputError) as cm:
                    load_learned(self.model_copy(edit))
                self.assertIn(msg, str(cm.exception))
        # values the module implements, written explicitly, load as the defaults do
        d = self.model_copy(lambda c: c["model"].update(attn_scale="inv_sqrt_dhead", tie_readout=False,
                                                        final_norm="rms", init="normal"))
        self.assertEqual(load_learned(d).generate("57+48+96"), "000>750>501>102$")

    def test_counterexamples_of_verify_learned(self):
        # verify_learned's counterexample on TA(10, 10) (the attack's, its report read back) through the twin:
        # the same greedy output, the same first wrong token, the teacher-forced margins of the C++ (fp32
        # against fp32: the module doc's rule, on the margins)
        from manyadd.counterexamples import explain, read_report
        d = os.path.join(SOURCE, "models", "cpu-sa1010-1l4h-d64-coupled-rel-far")
        rep = os.path.join(self.dir, "vl.json")
        tool("VERIFY_LEARNED", "--model", d, "--n", 10, "--m", 10, "--samples", 0, "--attack-seconds", 1, "-q",
             "--json", rep, ok=(1,))
        cex = read_report(rep)
        self.assertEqual(len(cex), 1)
        c = cex[0]
        self.assertEqual((c["n"], c["m"], c["source"]), (10, 10, "attack"))
        one = os.path.join(self.dir, "one.json")
        tool("VERIFY_LEARNED", "--model", d, "--n", 10, "--m", 10, "--problem", c["problem"], "--json", one, ok=(1,))
        with open(one) as f:
            ref = json.load(f)
        m32, m64 = load_learned(d), load_learned(d, dtype=torch.float64)
        e = explain(m32, c["problem"], 10, 10)
        e64 = explain(m64, c["problem"], 10, 10)
        self.assertFalse(e.exact)
        self.assertEqual(e.problem, c["problem"])
        self.assertEqual(e.greedy, ref["greedy"])
        self.assertEqual(e.expected, ref["expected"])
        self.assertEqual(e.first_wrong, ref["first_wrong"]["response_index"])
        self.assertEqual((e.expected_token, e.got_token), (ref["first_wrong"]["expected"], ref["first_wrong"]["got"]))
        fp32_check(self, ref["margins"], e.margins, e64.margins, "verify_learned margins")
        self.assertIn("response index %d" % e.first_wrong, str(e))
        # a problem whose operands all start with 0 keeps its shape (parse_problem alone would shrink it)
        self.assertEqual(explain(m32, "01+02", 2, 2).shape.n, 2)
        with self.assertRaises(InputError):
            explain(m32, "123+4", 2)  # an operand longer than n
        with self.assertRaises(InputError):
            read_report(os.path.join(d, "config.json"))  # not a verify_learned report

    def test_hooks_and_batches(self):
        m = load_learned(MODELS[0], dtype=torch.float64)
        ex = m.example("57+48+96")
        with torch.no_grad():
            base = m(ex.tokens, ex.pos)
            # zero-ablating the digit-sum head (head 1, compare_attention's matching) breaks the answer
            def ablate(z, hook):
                z = z.clone()
                z[:, :, 1] = 0
                return z
            abl = m.run_with_hooks(ex.tokens, ex.pos, fwd_hooks=[("blocks.0.attn.hook_z", ablate)])
            self.assertNotEqual(fmt.decode(abl[0, ex.shape.eq_index:].argmax(-1)), "000>750>501>102$")
            self.assertTrue(torch.equal(m(ex.tokens, ex.pos), base))  # the hook is gone afterwards
            logits, cache = m.run_with_cache(ex.tokens, ex.pos, names_filter="resid")
            self.assertEqual(sorted(cache), ["blocks.0.hook_resid_mid", "blocks.0.hook_resid_post",
                                             "blocks.0.hook_resid_pre"])
            # a padded batch of two shapes: the real rows equal single runs (float64: orders do not matter)
            ex2 = m.example(LONG, 3, 5)
            T = ex2.shape.N
            pad = lambda t: torch.cat([t, torch.zeros(1, T - t.shape[1], dtype=t.dtype)], 1)  # noqa: E731
            tok = torch.cat([pad(ex.tokens), ex2.tokens])
            pos = [torch.cat([pad(a), b]) for a, b in zip(ex.pos, ex2.pos)]
            both = m(tok, pos)
            self.assertLess(float((both[0, :ex.shape.N] - base[0]).abs().max()), 1e-12)
            self.assertLess(float((both[1] - m(ex2.tokens, ex2.pos)[0]).abs().max()), 1e-12)
            self.assertEqual(tuple(m.run_with_cache(tok, pos)[1]["blocks.0.attn.hook_pattern"].shape), (2, 4, T, T))
        with self.assertRaises(ValueError):
            m(ex.tokens, [ex.pos[0]])  # one level for a two-level model
        with self.assertRaises(ValueError):
            m(ex.tokens, [ex.pos[0] + 40, ex.pos[1]])  # beyond max_pos1
        with self.assertRaises(KeyError):
            m.run_with_hooks(ex.tokens, ex.pos, fwd_hooks=[("blocks.0.attn.hook_nope", lambda z, hook: z)])
        with self.assertRaises(InputError):
            m.example("57+48+96", 38)  # s1 beyond max_pos1 - l


if __name__ == "__main__":
    unittest.main(verbosity=2)
