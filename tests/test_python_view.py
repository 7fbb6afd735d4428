#!/usr/bin/env python3
"""manyadd.view (Python) against compare_attention --html (C++): the same page data from the twins.

For the first TA(10, 10) sample, the C++ tool's page (the learned model's fp32 forward, the constructed
model's dense engine in double) and manyadd.view's page (load_learned's fp32 torch forward,
load_constructed's float64 on the model verify_construction --export writes for that shape) must agree:
every field of the layout and the matching equal; per model the predictions equal and the margins within
1e-3 + 1e-4 |margin| (fp32 logits of up to ~30 summed in another order: a few 1e-5 relative); per head and
query every key of weight >= 0.0105 on one side kept on the other with a weight within 1.5e-4 (both sides
round to 1e-4, so a weight near a rounding boundary moves one step; fp32 moves it by ~1e-6). Then
manyadd.view's refusals (exit 2, one line): no model, a constructed model of another shape, a malformed
problem, a --compare file that is not compare_attention's.

Exit 0 passed, 1 failed, 77 skipped (torch missing). Environment: MANYADD_SOURCE_DIR, COMPARE_ATTENTION,
VERIFY_CONSTRUCTION."""
import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("MANYADD_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(SRC, "python"))


def fail(why):
    print("test_python_view: FAILED: " + why)
    sys.exit(1)


def page_data(path):
    t = open(path, encoding="utf-8").read()
    k = '<script id="page-data" type="application/json">'
    s = t.index(k) + len(k)
    return json.loads(t[s:t.index("</script>", s)].replace("<\\/", "</"))


def run(cmd, want=0, env=None):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != want:
        fail("%s: exit %d, wanted %d\n%s%s" % (" ".join(map(str, cmd)), r.returncode, want, r.stdout, r.stderr))
    return r


def main():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("test_python_view: skipped: torch cannot be imported (%s)" % e)
        return 77
    model = os.path.join(SRC, "models", "cpu-sa1010-1l4h-d64")
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
    with tempfile.TemporaryDirectory() as tmp:
        cpp = os.path.join(tmp, "cpp.html")
        run([os.environ["COMPARE_ATTENTION"], "--learned", model, "--n", 10, "--m", 10, "--samples", 20,
             "--out", os.path.join(tmp, "cmp"), "--html", cpp, "--quiet"])
        C = page_data(cpp)
        exp = os.path.join(tmp, "exp")
        run([os.environ["VERIFY_CONSTRUCTION"], "--n", 10, "--m", 10, "--padding", "minimal", "--no-certify",
             "--export", exp, "--quiet"])
        py = os.path.join(tmp, "py.html")
        base = [sys.executable, "-m", "manyadd.view"]
        run(base + ["--learned", model, "--constructed", exp, "--problem", C["problem"], "--compare",
                    os.path.join(tmp, "cmp", "compare.json"), "--out", py], env=env)
        P = page_data(py)
        for k in ("format", "problem", "n", "m", "l", "N", "eq_index", "s1", "s2", "tokens", "pos1", "pos2",
                  "layout", "kept", "matching"):
            if C[k] != P[k]:
                fail("field %s differs: %r vs %r" % (k, str(C[k])[:200], str(P[k])[:200]))
        if len(C["models"]) != 2 or len(P["models"]) != 2:
            fail("two models on each page")
        for mc, mp in zip(C["models"], P["models"]):
            for a, b in zip(mc["predictions"], mp["predictions"]):
                if (a["index"], a["expected"], a["predicted"]) != (b["index"], b["expected"], b["predicted"]):
                    fail("%s: prediction %r vs %r" % (mc["name"], a, b))
                if abs(a["margin"] - b["margin"]) > 1e-3 + 1e-4 * abs(a["margin"]):
                    fail("%s: margin at %d: %r vs %r" % (mc["name"], a["index"], a["margin"], b["margin"]))
            if [h["name"] for h in mc["heads"]] != [h["name"] for h in mp["heads"]] or \
               [h["role"] for h in mc["heads"]] != [h["role"] for h in mp["heads"]]:
                fail("%s: heads or roles differ" % mc["name"])
            compared = 0
            for hc, hp in zip(mc["heads"], mp["heads"]):
                for q in range(C["N"]):
                    dc = dict(zip(hc["keys"][q], hc["weights"][q]))
                    dp = dict(zip(hp["keys"][q], hp["weights"][q]))
                    for x, y in ((dc, dp), (dp, dc)):
                        for key, w in x.items():
                            if w >= 0.0105:
                                if key not in y or abs(w - y[key]) > 1.5e-4:
                                    fail("%s %s query %d key %d: %r vs %r" % (mc["name"], hc["name"], q, key, w, y.get(key)))
                                compared += 1
                    if abs(hc["rest"][q] - hp["rest"][q]) > 1.5e-4 + 1e-3 * hc["rest"][q]:
                        fail("%s %s query %d: other mass %r vs %r" % (mc["name"], hc["name"], q, hc["rest"][q], hp["rest"][q]))
            if compared < 1000:
                fail("%s: only %d weights compared" % (mc["name"], compared))

        # A verify_learned report's counterexample, as compare_attention --counterexample takes it.
        report = os.path.join(SRC, "bench", "results", "length-wall", "verify", "far-mask-s2-ta1010.json")
        cx = os.path.join(tmp, "cx.html")
        run(base + ["--learned", model, "--counterexample", report, "--out", cx], env=env)
        want = json.load(open(report))["counterexample"]["problem"]
        if [o.zfill(10) for o in page_data(cx)["problem"].split("+")] != want.split("+") or page_data(cx)["n"] != 10:
            fail("the counterexample page shows %s, the report %s" % (page_data(cx)["problem"], want))
        # Refusals.
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            f.write('{"n": 3}')
        exp2 = os.path.join(tmp, "exp2")
        run([os.environ["VERIFY_CONSTRUCTION"], "--n", 3, "--m", 3, "--padding", "minimal", "--no-certify",
             "--export", exp2, "--quiet"])
        for args in (["--problem", "57+48"], ["--learned", model, "--constructed", exp2, "--problem", C["problem"]],
                     ["--learned", model, "--problem", "57+4x8"], ["--learned", model, "--problem", "57"],
                     ["--learned", model, "--problem", "57+48", "--compare", bad],
                     ["--learned", model, "--problem", "57+48", "--compare", os.path.join(tmp, "none.json")],
                     ["--learned", model, "--problem", "57+48", "--top-k", "0"],
                     ["--learned", model, "--counterexample", os.path.join(SRC, "README.md")],
                     ["--learned", model, "--counterexample", os.path.join(SRC, "bench", "results", "length-wall", "verify",
                                                                           "far-mask-s1-ta1010.json")],
                     ["--learned", model]):
            r = run(base + args + ["--out", os.path.join(tmp, "x.html")], want=2, env=env)
            if len(r.stderr.strip().splitlines()) != 1 or "Traceback" in r.stderr:
                fail("%s: not one line on stderr: %s" % (args, r.stderr))
        if os.path.exists(os.path.join(tmp, "x.html")):
            fail("a refused page was written")
    print("test_python_view: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
