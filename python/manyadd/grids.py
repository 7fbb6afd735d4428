"""The numbers the studies report from `evaluate`'s grid CSVs, written once: bench/paper-recipe/summarize.py,
bench/results/*/table.py and `python3 -m manyadd.sweep collect` import them from here. Standard library only.

    grid = read_grid("OUT/grids/base-s1.csv")      # {(n, m): accuracy or None (NA)}
    metrics(grid, 0.9)                              # cells >= 90%, worst cell, longest n at m = 2, most m at n = 1
    table_row(grid, 0.9, train=(10, 10))            # the controls tables' seven columns
"""

import math
import re

from .files import InputError, _show, read_regular

__all__ = ["read_rows", "read_grid", "median", "metrics", "TABLE_COLUMNS", "table_row", "table_header", "format_row"]

MAX_GRID = 16 << 20  # bytes of a grid CSV (evaluate's 30 x 30 grid: 25 KB)
_INT = re.compile(r"-?[0-9]{1,9}")
_REAL = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?")


def read_rows(path, max_bytes=MAX_GRID):
    """(header, rows) of a CSV as evaluate writes it (a regular file of at most max_bytes, UTF-8, comma-
    separated, no quoting, every row as many fields as the header); InputError otherwise."""
    try:
        text = read_regular(path, max_bytes).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError("'%s' is not a grid CSV: %s" % (_show(path), e)) from None
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    if not lines:
        raise InputError("'%s' is empty: not a grid CSV" % _show(path))
    head = lines[0].split(",")
    rows = [l.split(",") for l in lines[1:]]
    for k, f in enumerate(rows, 2):
        if len(f) != len(head):
            raise InputError("'%s' line %d has %d fields, its header %d: not a grid CSV" % (_show(path), k, len(f),
                                                                                         len(head)))
    return head, rows


def read_grid(path, column="accuracy"):
    """{(n, m): value or None} of one column of a grid CSV with columns n, [m,] column (no m column: a
    one-axis task's grid, m = 1); None when the file has no such column. InputError when the file is not
    such a CSV (read_rows; n and m integers, each cell once, a value a finite number or NA)."""
    head, rows = read_rows(path)
    if column not in head:
        return None
    if "n" not in head:
        raise InputError("'%s' has no n column: not a grid CSV" % _show(path))
    i_n, i_a = head.index("n"), head.index(column)
    i_m = head.index("m") if "m" in head else None
    grid = {}
    for k, f in enumerate(rows, 2):
        if not (_INT.fullmatch(f[i_n]) and (i_m is None or _INT.fullmatch(f[i_m]))):
            raise InputError("'%s' line %d: n and m must be integers" % (_show(path), k))
        cell = (int(f[i_n]), 1 if i_m is None else int(f[i_m]))
        if cell in grid:
            raise InputError("'%s' line %d: cell %s appears twice" % (_show(path), k, cell))
        if f[i_a] == "NA":
            grid[cell] = None
        elif _REAL.fullmatch(f[i_a]) and math.isfinite(float(f[i_a])):
            grid[cell] = float(f[i_a])
        else:
            raise InputError("'%s' line %d: %s %r is not a finite number or NA" % (_show(path), k, column, f[i_a][:40]))
    return grid


def median(values):
    """The median; with an even count, the mean of the middle two (the paper's heatmaps' convention)."""
    v = sorted(values)
    k = len(v)
    return v[k // 2] if k % 2 else 0.5 * (v[k // 2 - 1] + v[k // 2])


def metrics(grid, thr):
    """cells >= thr (of the evaluated cells); the worst cell; the longest operand length n such that
    (1, 2) .. (n, 2) are all >= thr (0 if (1, 2) is not); the most operands m such that (1, 2) .. (1, m)
    are all >= thr (1 if (1, 2) is not)."""
    vals = [a for a in grid.values() if a is not None]
    n_max = max(n for n, _ in grid)
    m_max = max(m for _, m in grid)
    longest = 0
    for n in range(1, n_max + 1):
        a = grid.get((n, 2))
        if a is None or a < thr:
            break
        longest = n
    most = 1
    for m in range(2, m_max + 1):
        a = grid.get((1, m))
        if a is None or a < thr:
            break
        most = m
    return {"cells_at_threshold": sum(a >= thr for a in vals), "cells": len(vals), "worst_cell": min(vals),
            "longest_operand_at_m2": longest, "most_operands_at_n1": most}


# The seven columns of the controls' tables (bench/results/controls-cpu/README.md), in table_row's order.
TABLE_COLUMNS = ("in_distribution_mean", "in_distribution_worst", "mean", "cells_at_threshold", "cells",
                 "longest_operand_at_m2", "most_operands_at_n1")


def table_row(grid, thr, train=(10, 10)):
    """The in-distribution mean and worst cell (TA(n, m), n <= train[0], m <= train[1]: the training region
    SA(n, m)), the mean of every evaluated cell, then metrics()' cells >= thr, cells, longest n at m = 2 and
    most m at n = 1: a list in TABLE_COLUMNS' order."""
    m = metrics(grid, thr)
    ind = [a for (n, mm), a in grid.items() if n <= train[0] and mm <= train[1] and a is not None]
    allv = [a for a in grid.values() if a is not None]
    return [sum(ind) / len(ind) if ind else float("nan"), min(ind) if ind else float("nan"), sum(allv) / len(allv),
            m["cells_at_threshold"], m["cells"], m["longest_operand_at_m2"], m["most_operands_at_n1"]]


def table_header(pct, first="model"):
    """The markdown header (two lines) of the columns format_row writes, after a first column."""
    return ("| %s | in-distribution mean | worst in-distribution cell | mean of all cells | cells >= %d%% | "
            "longest n at m = 2 | most m at n = 1 |\n|---|---|---|---|---|---|---|" % (first, pct))


def format_row(r):
    """table_row's numbers (or their medians) as the tables' cells, ' | ' between them."""
    return "%.4f | %.2f | %.3f | %g/%g | %g | %g" % tuple(r)
