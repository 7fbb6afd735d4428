#!/usr/bin/env python3
"""Runs the commands quoted in the READMEs against a build, so that a README never shows a command that
a tool refuses.

    check_readme_commands.py --build BUILD_DIR --source SOURCE_DIR [--list]

What counts as a command: a line inside a ``` block of README.md, learn/README.md, models/README.md or
python/README.md that starts with `./x TOOL`, `$ ./x TOOL` or `build/DIR/TOOL` (lines ending in `\\` are
joined; a trailing `# comment` is dropped). Commands in prose (inline backticks) are not run.

How it runs them: in file order, the commands of one README in one fresh temporary directory (the
current directory of every command: `out/...` and every other relative output lands there, so a
command may read what an earlier one of the same README wrote, as a reader following it would; a
command quoted twice in one README runs once);
`./x TOOL` and `build/DIR/TOOL` become the build's TOOL; paths to committed files (models/, configs/,
tests/data/) become the source tree's; the placeholders DIR and OUT become a committed model and
`out/placeholder`. Made cheap, not different: `train` gets `--stop-after 5` and `train_grid`
`--stop-after 2` (every flag is still parsed and checked, and the model directory later commands read
is still written), and `--samples N` is capped at 20 (lower where one sample is long: SAMPLE_CAPS).
Each command must exit 0 -- or 1 for the tools whose 1 is a verdict (a check that failed on the 5-step
model, or verify_learned's counterexample: evaluate, evaluate_grid, verify_construction, verify_learned)
-- within 120 s, and should take a third of that at most on a loaded 2-core machine (each command's time
is printed); 2 (usage) or 3 (internal) is what a
wrong command gives.

What is not run is listed (printed with its reason) in SKIP below: nothing is dropped silently; a
command that matches no skip rule runs, so a new expensive command fails here by its time limit
until it is listed.

Exit codes: 0 every command ran as expected; 1 some did not (each printed); 2 bad usage.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

READMES = ["README.md", "learn/README.md", "models/README.md", "python/README.md"]

# (regex on the command as written, reason). First match wins.
SKIP = [
    (r"^\./x (build|test|bench|fuzz)\b", "drives the build, the test suite, the benchmarks or fuzzing itself"),
    (r"verify_construction --n 1000 --m 1000\b", "the headline run: 2,011,005 tokens, minutes and GiBs of memory"),
    (r"compare_attention .*--grid\b", "the whole 30 x 29 attention grid: minutes (test_learn_cli runs a small --grid)"),
    (r"--model out/parity\b", "reads a parity model directory that no README command writes (train --task parity)"),
]
# Tools whose exit code 1 is a verdict (a failed check) rather than an error.
VERDICT_TOOLS = {"evaluate", "evaluate_grid", "verify_construction", "verify_learned"}
# Training tools run a few steps only.
STOP_AFTER = {"train": "5", "train_grid": "2"}
PLACEHOLDERS = {"DIR": "models/cpu-sa1010-1l4h-d64", "OUT": "out/placeholder"}
COMMITTED = ("models/", "configs/", "tests/data/")
TIMEOUT_S = 120
# --samples is capped at 20, or lower where one sample is long: (regex on the command, cap, reason).
SAMPLE_CAPS = [
    (r"evaluate_grid .*--table iv-digits\b", 2,
     "Table IV's left half runs 2 x 1000 to 2 x 4000 digits: 20 samples took 60-174 s, 2 take ~6 s"),
]


def sample_cap(cmd):
    return next((cap for pat, cap, _ in SAMPLE_CAPS if re.search(pat, cmd)), 20)


def commands(path):
    """(line number, command text) of every command in the ``` blocks of one README."""
    out, fence, pending, start = [], False, "", 0
    with open(path, encoding="utf-8") as f:
        for no, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.lstrip().startswith("```"):
                fence, pending = not fence, ""
                continue
            if not fence:
                continue
            text = line.strip()
            if pending:
                text, start = pending + " " + text, start
            elif re.match(r"^(\$ )?\./x \w|^build/[\w-]+/\w", text):
                start = no
            else:
                continue
            if text.endswith("\\"):
                pending = text[:-1].rstrip()
                continue
            pending = ""
            text = re.sub(r"^\$ ", "", text)
            text = re.sub(r"\s+#.*$", "", text).strip()
            out.append((start, text))
    return out


def find_tool(build, name):
    for root, dirs, files in os.walk(build):
        dirs[:] = [d for d in dirs if d not in ("CMakeFiles", "Testing", "_deps")]
        if name in files:
            p = os.path.join(root, name)
            if os.access(p, os.X_OK):
                return p
    return None


def rewrite(cmd, build, source):
    """The argv to run, or raise ValueError with the reason it cannot be."""
    words = shlex.split(cmd)
    if words[0] == "./x":
        tool, args = words[1], words[2:]
    else:
        tool, args = os.path.basename(words[0]), words[1:]
    exe = find_tool(build, tool)
    if exe is None:
        raise ValueError("no tool '%s' in the build" % tool)
    out = []
    for i, a in enumerate(args):
        a = PLACEHOLDERS.get(a, a)
        if a.startswith(COMMITTED):
            a = os.path.join(source, a)
        if i > 0 and args[i - 1] == "--samples" and a.isdigit():
            a = str(min(int(a), sample_cap(cmd)))
        out.append(a)
    if tool in STOP_AFTER and "--stop-after" not in out:
        out += ["--stop-after", STOP_AFTER[tool]]
    return tool, [exe] + out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--list", action="store_true", help="list the commands and what would be done, run nothing")
    a = ap.parse_args()
    a.build, a.source = os.path.abspath(a.build), os.path.abspath(a.source)
    failures, ran, skipped = [], 0, 0
    for readme in READMES:
        path = os.path.join(a.source, readme)
        if not os.path.exists(path):
            print("%s: missing" % readme)
            failures.append(readme)
            continue
        with tempfile.TemporaryDirectory(prefix="manyadd_readme_") as cwd:
            seen = set()
            for no, cmd in commands(path):
                where = "%s:%d" % (readme, no)
                if cmd in seen:
                    print("same %s  %s  (quoted above: run once)" % (where, cmd))
                    continue
                seen.add(cmd)
                reason = next((r for pat, r in SKIP if re.search(pat, cmd)), None)
                if reason:
                    skipped += 1
                    print("SKIP %s  %s\n     (%s)" % (where, cmd, reason))
                    continue
                try:
                    tool, argv = rewrite(cmd, a.build, a.source)
                except ValueError as e:
                    print("FAIL %s  %s\n     (%s)" % (where, cmd, e))
                    failures.append(where)
                    continue
                if a.list:
                    print("RUN  %s  %s" % (where, " ".join(shlex.quote(x) for x in argv)))
                    continue
                ok_codes = {0, 1} if tool in VERDICT_TOOLS else {0}
                t0 = time.monotonic()
                try:
                    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)
                    rc, err = r.returncode, r.stderr
                except subprocess.TimeoutExpired:
                    rc, err = "timeout (%d s)" % TIMEOUT_S, ""
                ran += 1
                took = time.monotonic() - t0
                if rc in ok_codes:
                    print("ok   %s  %s  (exit %d, %.1f s)" % (where, cmd, rc, took))
                else:
                    print("FAIL %s  %s\n     exit %s: %s" % (where, cmd, rc, err.strip()[-2000:]))
                    failures.append(where)
    print("%d commands run, %d skipped (listed above), %d failed" % (ran, skipped, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
