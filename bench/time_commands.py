#!/usr/bin/env python3
"""Wall and CPU time of verify_construction commands, two binaries interleaved (Python stdlib only).

usage: time_commands.py OUT.json RUNS BASE_BINARY NEW_BINARY -- ARGS... [-- ARGS...]...
Runs every argument list RUNS times with each binary (BASE then NEW, interleaved, so both see the
same load), records wall seconds, CPU seconds (user + sys of the child) and the exit code, and the
1-minute load average before each run. BASE_BINARY may be "-" (only NEW runs). Prints medians.
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def run(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    code = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "exit": code, "load1": load}


def main():
    if len(sys.argv) < 6 or "--" not in sys.argv:
        print(__doc__, file=sys.stderr)
        return 2
    out, runs, base, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    rest = sys.argv[5:]
    groups, cur = [], None
    for a in rest:
        if a == "--":
            cur = []
            groups.append(cur)
        else:
            cur.append(a)
    report = []
    for args in groups:
        entry = {"args": " ".join(args), "base": [], "new": []}
        for _ in range(runs):
            if base != "-":
                entry["base"].append(run([base] + args))
            entry["new"].append(run([new] + args))
        for side in ("base", "new"):
            if entry[side]:
                entry[side + "_median_wall"] = statistics.median(r["wall"] for r in entry[side])
                entry[side + "_median_cpu"] = statistics.median(r["cpu"] for r in entry[side])
        report.append(entry)
        line = f"{entry['args']:<48}"
        for side in ("base", "new"):
            if entry[side]:
                line += f"  {side}: wall {entry[side + '_median_wall']:.2f} s cpu {entry[side + '_median_cpu']:.2f} s exit {entry[side][0]['exit']}"
        print(line, flush=True)
    json.dump({"runs": runs, "base": base, "new": new, "nproc": os.cpu_count(), "results": report}, open(out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
