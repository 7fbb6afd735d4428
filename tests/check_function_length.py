#!/usr/bin/env python3
"""No function of the C++ and CUDA sources longer than 150 lines (core/ construct/ proofs-check/ learn/
kernels/): a function a reader cannot hold in their head is split along its own seams.

A function is found as the C++ formatter writes one: a line that ends a declarator with ')' (qualifiers,
a trailing return type or a constructor's initializer list allowed) and opens its body with '{', at any
depth (functions inside namespaces and classes, lambdas that open a body that way); its length runs to the
line that closes that brace. Comments, strings and character literals are blanked first, so braces inside
them do not count; control statements (if/for/while/switch) are not functions. A function that must stay
longer (none now) is listed in ALLOWED with the reason.

    python3 tests/check_function_length.py [--source DIR] [--limit 150]

Exit 0 when every function fits, 1 with the list otherwise, 2 on bad usage."""
import argparse
import os
import re
import sys

ROOTS = ("core", "construct", "proofs-check", "learn", "kernels")
SUFFIXES = (".cpp", ".hpp", ".cu", ".cuh", ".inc", ".h")
ALLOWED = {}  # "path:first line of the declarator" -> why

_OPENS = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override|final)?\s*(->\s*[\w:<>,\s*&]+)?\s*\{\s*$")
_INIT_LIST = re.compile(r"^\s*[:,]\s*[\w:]+[({].*[)}]\s*\{\s*$")
_CONTROL = re.compile(r"^\s*(\}\s*)?(if|for|while|switch|else|do|catch)\b")


def blank(line, state):
    """The line with comments, strings and char literals blanked; state carries a /* */ comment on."""
    out, i, n = [], 0, len(line)
    while i < n:
        if state["block"]:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out)
            state["block"], i = False, j + 2
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"], i = True, i + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def long_functions(path, limit):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    state = {"block": False}
    depth, open_fns, found = 0, [], []
    for k, raw in enumerate(lines):
        code = blank(raw, state)
        if (_OPENS.search(code) or _INIT_LIST.search(code)) and not _CONTROL.search(code):
            open_fns.append((depth, k, raw.strip()))
        depth += code.count("{") - code.count("}")
        while open_fns and depth <= open_fns[-1][0]:
            d, start, head = open_fns.pop()
            if k - start + 1 > limit:
                found.append((k - start + 1, start + 1, head))
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    p.add_argument("--limit", type=int, default=150)
    a = p.parse_args()
    if a.limit < 1 or not os.path.isdir(os.path.join(a.source, "learn")):
        print("check_function_length: --source must be the repository root and --limit >= 1", file=sys.stderr)
        return 2
    bad, scanned = [], 0
    for root in ROOTS:
        for dirpath, _, files in os.walk(os.path.join(a.source, root)):
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, a.source)
                scanned += 1
                for n, line, head in long_functions(path, a.limit):
                    if "%s:%s" % (rel, head) not in ALLOWED:
                        bad.append("%s:%d: %d lines: %s" % (rel, line, n, head[:90]))
    if bad:
        print("functions over %d lines (split them along their seams):" % a.limit)
        print("\n".join(sorted(bad)))
        return 1
    print("%d files, every function within %d lines" % (scanned, a.limit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
