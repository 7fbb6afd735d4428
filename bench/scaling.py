#!/usr/bin/env python3
"""Time verify_construction against N and fit the exponent (time ~ N^k), standard library only.

Runs build/proofs-check/verify_construction --n S --m S for S in SIZES (N = (2S+1)(l+1) ~ 2 S^2),
records the report's seconds (total, certificate, cross-check) and the peak memory from
/usr/bin/time -v, and fits log(time) = k log(N) + c by least squares.

  python3 bench/scaling.py [--out bench/results/scaling-cpu.json] [--sizes 70,224,707,1000,2236,4472,10000]
"""
import argparse, json, math, os, re, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--out", default="bench/results/scaling-cpu.json")
ap.add_argument("--sizes", default="70,224,707,1000,2236,4472,10000")
ap.add_argument("--exe", default="build/proofs-check/verify_construction")
a = ap.parse_args()

rows = []
for s in [int(x) for x in a.sizes.split(",")]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = ["/usr/bin/time", "-v", a.exe, "--n", str(s), "--m", str(s), "--json", path]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    rep = json.load(open(path))
    os.unlink(path)
    row = {"n": s, "m": s, "N": rep["N"], "exit": p.returncode, "wall_s": round(wall, 3),
           "report_s": rep["seconds"], "certificate_s": rep["certificate"]["seconds"],
           "cross_check_s": rep["cross_check"]["seconds"] if rep.get("cross_check") else None,
           "peak_rss_mb": round(rss / 1024, 1), "status": rep["certificate"]["status"]}
    rows.append(row)
    print(json.dumps(row), flush=True)

def fit(key):
    pts = [(math.log(r["N"]), math.log(r[key])) for r in rows if r.get(key)]
    n = len(pts)
    mx = sum(x for x, _ in pts) / n; my = sum(y for _, y in pts) / n
    k = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return round(k, 3)

commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = [l for l in open("/proc/cpuinfo") if l.startswith("model name")][0].split(":")[1].strip()
out = {"machine": f"{os.cpu_count()} cores, {cpu}", "commit": commit, "command": " ".join(sys.argv),
       "load_average_at_end": os.getloadavg(), "rows": rows,
       "exponent_total": fit("report_s"), "exponent_certificate": fit("certificate_s"),
       "exponent_cross_check": fit("cross_check_s")}
json.dump(out, open(a.out, "w"), indent=2)
print("exponents: total %.3f certificate %.3f cross-check %.3f" % (out["exponent_total"], out["exponent_certificate"], out["exponent_cross_check"]))
