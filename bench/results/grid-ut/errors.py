"""Where the grid model's answers go wrong: reads evaluate_grid --problems-csv files (one row per problem)
and prints, per instance, the sequence accuracy split by the problem's longest carry propagation and
where in the answer the wrong digits lie, and (files that have the column) by the weight of the argmax
actions' grid in Seq2Grid's soft mixture.

    python3 bench/results/grid-ut/errors.py PROBLEMS_CSV [PROBLEMS_CSV ...]   (from the repository root)
    python3 bench/results/grid-ut/errors.py --update ERRORS_MD [PROBLEMS_CSV ...]

--update rewrites ERRORS_MD with the sections of the files given replaced or added and every other file's
sections kept (the problems CSVs are not committed, so a fresh checkout has only those it ran since),
ordered by file path.

The longest carry propagation of a problem: the longest run of consecutive columns (units first) whose
carry-out the incoming carry changed, i.e. floor((s + c) / 10) != floor(s / 10) with s the column's digit
sum and c its carry-in; a column's answer digit depends on columns that far to its right and no further
(2 terms: a run of columns summing to 9 after one that carries). The grid model's 3 x 3 local attention
moves information one column per recurrent step, so a problem whose propagation is longer than its
steps cannot come out exact unless the model carries some other way. Wrong digits: positions counted
from the units digit (0), over the valid matches only (the authors' metric: PAD-PAD is not counted),
reported as a fraction of the answer's length (0 = units end, 1 = most significant end)."""
import csv
import os
import statistics
import sys

from collections import defaultdict


def columns(problem):
    """The digit sums per column, units first."""
    ops = problem.split("+")
    n = max(len(o) for o in ops)
    return [sum(int(o[-1 - i]) for o in ops if i < len(o)) for i in range(n)]


def longest_propagation(problem):
    best = run = 0
    c = 0
    for s in columns(problem):
        changed = c > 0 and (s + c) // 10 != s // 10
        run = run + 1 if changed else 0
        best = max(best, run)
        c = (s + c) // 10
    return best


def wrong_positions(row):
    """Positions (from the units digit) of the valid matches that are wrong, and the answer's length."""
    pred, want = row["prediction"], row["sum"]
    W = len(pred)
    target = "_" * (W - len(want)) + want
    wrong = [W - 1 - k for k in range(W) if not (pred[k] == "_" and target[k] == "_") and pred[k] != target[k]]
    return wrong, len(want)


def sections(paths):
    """[(path, text)]: one markdown section per (file, instance), in the files' order."""
    out = []
    by = defaultdict(list)  # (file, instance) -> rows: files are not merged (other models, other steps)
    need = ("instance", "problem", "prediction", "sum", "exact", "steps")  # evaluate_grid --problems-csv's
    for p in paths:
        try:
            with open(p, newline="") as f:
                reader = csv.DictReader(f)
                missing = [c for c in need if c not in (reader.fieldnames or [])]
                if missing:
                    fail("%s: not an evaluate_grid --problems-csv file (no column %s)" % (p, ", ".join(missing)))
                for r in reader:
                    if None in r.values() or None in r:
                        fail("%s: line %d has %s fields than the header" % (p, reader.line_num, "fewer" if None in r.values() else "more"))
                    by[(p, r["instance"])].append(r)
        except OSError as e:
            fail("%s: %s" % (p, e.strerror or e))
        except (csv.Error, UnicodeDecodeError) as e:
            fail("%s: not a CSV file (%s)" % (p, e))
    for (path, inst), rows in by.items():
        lines = []
        emit = lines.append
        n = len(rows)
        exact = sum(r["exact"] == "1" for r in rows)
        weight = ""
        if "argmax_weight" in rows[0]:
            w = [float(r["argmax_weight"]) for r in rows]
            weight = ", argmax weight median %.3f [%.3f, %.3f]" % (statistics.median(w), min(w), max(w))
        emit("## %s, %s: %d problems, sequence accuracy %.3f, mean steps %.2f%s" %
             (path, inst, n, exact / n, statistics.mean(int(r["steps"]) for r in rows), weight))
        groups = defaultdict(lambda: [0, 0, []])
        for r in rows:
            g = groups[longest_propagation(r["problem"])]
            g[0] += 1
            g[1] += r["exact"] == "1"
            g[2].append(int(r["steps"]))
        emit("\n| longest carry propagation | problems | exact | seq acc | steps (median) |")
        emit("|---|---|---|---|---|")
        for k in sorted(groups):
            t, e, st = groups[k]
            emit("| %d | %d | %d | %.3f | %g |" % (k, t, e, e / t, statistics.median(st)))
        if "argmax_weight" in rows[0]:  # Seq2Grid: the weight of the argmax actions' grid in the soft mixture
            edges = [1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.0]
            emit("\n| argmax actions' weight | problems | seq acc |")
            emit("|---|---|---|")
            for hi, lo in zip(edges, edges[1:]):
                sel = [r for r in rows if lo < float(r["argmax_weight"]) <= hi or (lo == 0.0 and float(r["argmax_weight"]) == 0)]
                if sel:
                    emit("| (%.2f, %.2f] | %d | %.3f |" % (lo, hi, len(sel), sum(r["exact"] == "1" for r in sel) / len(sel)))
        wrong = [wrong_positions(r) for r in rows if r["exact"] != "1"]
        if wrong:
            counts = [len(w) for w, _ in wrong]
            rel = [p / max(1, L - 1) for w, L in wrong for p in w]
            bins = [0] * 10
            for x in rel:
                bins[min(9, int(x * 10))] += 1
            emit("\nwrong problems: %d; wrong digits per wrong problem: median %g, max %d; where the wrong digits"
                 " lie (fraction of the answer's length from the units end, deciles): %s" %
                 (len(wrong), statistics.median(counts), max(counts), " ".join(str(b) for b in bins)))
        out.append((path, "\n".join(lines) + "\n\n"))
    return out


def read_sections(md):
    """[(path, text)] of an errors.md this script wrote: a section starts at '## PATH, INSTANCE: ...'."""
    out = []
    for line in md.splitlines(keepends=True):
        if line.startswith("## "):
            out.append([line[3:].split(", ", 1)[0], line])
        elif out:
            out[-1][1] += line
        elif line.strip():
            fail("the file to update does not start with a section ('## PATH, INSTANCE: ...')")
    return [tuple(x) for x in out]


def main(argv):
    if argv[:1] == ["--update"]:
        if len(argv) < 2 or argv[1].startswith("-") or any(a.startswith("-") for a in argv[2:]):
            usage()
        target, paths = argv[1], argv[2:]
        old = []
        if os.path.exists(target):
            with open(target) as f:
                old = read_sections(f.read())
        new = sections(paths)
        fresh = {p for p, _ in new}
        merged = sorted([x for x in old if x[0] not in fresh] + new, key=lambda x: x[0])  # stable: instances keep order
        tmp = target + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join(text for _, text in merged))
        os.replace(tmp, target)
        return
    if not argv or any(a.startswith("-") for a in argv):
        usage()
    sys.stdout.write("".join(text for _, text in sections(argv)))


def fail(msg):
    print("errors.py: " + msg, file=sys.stderr)
    sys.exit(2)


def usage():
    fail("usage: errors.py PROBLEMS_CSV [PROBLEMS_CSV ...] | errors.py --update ERRORS_MD [PROBLEMS_CSV ...]")


if __name__ == "__main__":
    main(sys.argv[1:])
