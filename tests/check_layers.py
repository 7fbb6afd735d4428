#!/usr/bin/env python3
"""learn/'s rooms and their layering, read from the code's own includes.

learn/ is split into rooms, one folder per concern, each with its headers in
learn/include/manyadd/learn/ROOM/ and its sources in learn/src/ROOM/ (learn/README.md, "Rooms"). The rooms
stand in layers, bottom to top:

    decoder < tasks < devices < runs < {analysis, grid} < cli < tools

A file may include files of its own room and of the rooms below it; an include that runs back up (to a
higher room, or sideways between analysis and grid) is a defect, as is a source or header outside every
room, or a room that is not in the table. Includes are the quoted or bracketed "manyadd/learn/ROOM/x.hpp"
and, inside a room, the room's own private headers ("x.hpp", "x.inc").

    python3 tests/check_layers.py [--source DIR]           # exit 0 when the layering holds, 1 otherwise
    python3 tests/check_layers.py [--source DIR] --graph   # and the picture: rooms, files, edges between rooms
    python3 tests/check_layers.py --self-test              # the checker on a made-up tree with known defects

Exit 0: the layering holds; 1: the violations, one per line (file:line: what); 2: bad usage."""
import argparse
import os
import re
import sys

# room -> layer (a room may include rooms of a lower layer; equal layers are separate rooms side by side)
LAYERS = {"decoder": 0, "tasks": 1, "devices": 2, "runs": 3, "analysis": 4, "grid": 4, "cli": 5, "tools": 6}
ABOUT = {
    "decoder": "the paper's decoder: its configuration, layout, layers and the one forward/backward",
    "tasks": "the tasks' formats, data, hard data, paper 003's problems, a run's recipe",
    "devices": "the training devices: the batch interface, the fast CPU device, oneDNN products, CUDA",
    "runs": "training loop, checkpoints, model files, run files, evaluation",
    "analysis": "attention dumps, head matching against the construction, plots",
    "grid": "paper 003's grid universal transformer: layers, model, loss, trainer",
    "cli": "what the tools share: devices by name, config flags, memory checks",
    "tools": "the command-line tools (one main each)",
}
SUFFIXES = (".cpp", ".hpp", ".inc", ".h", ".cu", ".cuh")
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


def room_files(src):
    """(room, path relative to src) of every learn/ source and header; rooms None for a file outside one."""
    out = []
    roots = [os.path.join("learn", "include", "manyadd", "learn"), os.path.join("learn", "src"),
             os.path.join("learn", "tools")]
    for root in roots:
        base = os.path.join(src, root)
        for dirpath, _, names in os.walk(base):
            for n in sorted(names):
                if not n.endswith(SUFFIXES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, n), src)
                parts = os.path.relpath(path, root).split(os.sep)
                if root.endswith("tools"):
                    room = "tools"
                else:
                    room = parts[0] if len(parts) > 1 else None
                out.append((room, path))
    return sorted(out, key=lambda t: t[1])


def check(src):
    """(violations, edges {(from room, to room): count}, files per room)."""
    bad, edges, count = [], {}, {}
    files = room_files(src)
    if not files:
        return [f"{src}: no learn/ sources found"], edges, count
    for room, path in files:
        if room is None:
            bad.append(f"{path}: outside every room (learn/src/ROOM/ or learn/include/manyadd/learn/ROOM/)")
            continue
        if room not in LAYERS:
            bad.append(f"{path}: room '{room}' is not in check_layers.py's LAYERS")
            continue
        count[room] = count.get(room, 0) + 1
        with open(os.path.join(src, path), encoding="utf-8") as f:
            for ln, line in enumerate(f, 1):
                m = _INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                if inc.startswith("manyadd/learn/"):
                    parts = inc[len("manyadd/learn/"):].split("/")
                    if len(parts) < 2:
                        bad.append(f"{path}:{ln}: includes {inc}, outside every room")
                        continue
                    to = parts[0]
                elif ".." in inc.split("/"):
                    bad.append(f"{path}:{ln}: includes {inc} by a relative path out of its folder")
                    continue
                elif "/" not in inc and inc.endswith((".hpp", ".inc", ".h")) and m.group(0).rstrip().endswith('"'):
                    to = room  # a private header of the file's own room
                else:
                    continue  # another module of the project, a library, the standard library
                if to not in LAYERS:
                    bad.append(f"{path}:{ln}: includes {inc}: room '{to}' unknown")
                    continue
                if to != room:
                    edges[(room, to)] = edges.get((room, to), 0) + 1
                    if LAYERS[to] >= LAYERS[room]:
                        how = "up" if LAYERS[to] > LAYERS[room] else "sideways"
                        bad.append(f"{path}:{ln}: includes {inc}: runs {how} from {room} "
                                   f"(layer {LAYERS[room]}) to {to} (layer {LAYERS[to]})")
    return bad, edges, count


def picture(edges, count):
    lines = ["learn/'s rooms, top to bottom, with the rooms each one includes (include lines):", ""]
    for room in sorted(LAYERS, key=lambda r: (-LAYERS[r], r)):
        below = sorted(((to, n) for (fr, to), n in edges.items() if fr == room), key=lambda t: (-LAYERS[t[0]], t[0]))
        uses = ", ".join(f"{to} ({n})" for to, n in below) or "nothing in learn/"
        lines.append(f"  {LAYERS[room]}  {room:9} {count.get(room, 0):3} files  {ABOUT[room]}")
        lines.append(f"     {'':9}           -> {uses}")
    return "\n".join(lines)


def self_test():
    """The checker finds each kind of defect in a made-up tree, and passes the same tree once fixed."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        def put(rel, text):
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        inc = os.path.join("learn", "include", "manyadd", "learn")
        put(os.path.join(inc, "decoder", "model.hpp"), "#pragma once\n#include <vector>\n")
        put(os.path.join(inc, "runs", "train.hpp"), '#include "manyadd/learn/decoder/model.hpp"\n')
        put(os.path.join("learn", "src", "decoder", "model.cpp"),
            '#include "manyadd/learn/decoder/model.hpp"\n#include "private.hpp"\n')
        put(os.path.join("learn", "src", "grid", "g.cpp"), '#include "manyadd/learn/runs/train.hpp"\n')
        put(os.path.join("learn", "tools", "train.cpp"), '#include "manyadd/learn/runs/train.hpp"\n')
        bad, _, _ = check(d)
        if bad:
            return [f"self-test: a sound tree reported {bad}"]
        put(os.path.join("learn", "src", "decoder", "up.cpp"), '#include "manyadd/learn/runs/train.hpp"\n')
        put(os.path.join("learn", "src", "grid", "side.cpp"), '#include "manyadd/learn/analysis/attention.hpp"\n')
        put(os.path.join("learn", "src", "loose.cpp"), "int x;\n")
        put(os.path.join("learn", "src", "attic", "old.cpp"), "int y;\n")
        put(os.path.join("learn", "src", "tasks", "rel.cpp"), '#include "../runs/train.hpp"\n')
        bad, _, _ = check(d)
        want = ["up.cpp:1: includes manyadd/learn/runs/train.hpp: runs up", "side.cpp:1: includes "
                "manyadd/learn/analysis/attention.hpp: runs sideways", "loose.cpp: outside every room",
                "room 'attic' is not in", "rel.cpp:1: includes ../runs/train.hpp by a relative path"]
        missed = [w for w in want if not any(w in b for b in bad)]
        if missed or len(bad) != len(want):
            return [f"self-test: expected {want}, got {bad}"]
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--graph", action="store_true", help="print the rooms and their edges")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a made-up tree")
    args = ap.parse_args()
    if args.self_test:
        bad = self_test()
        for b in bad:
            print(b)
        print("check_layers: self-test " + ("FAILED" if bad else "passed"))
        return 1 if bad else 0
    if not os.path.isdir(os.path.join(args.source, "learn")):
        print(f"check_layers: {args.source} has no learn/ folder", file=sys.stderr)
        return 2
    bad, edges, count = check(args.source)
    if args.graph:
        print(picture(edges, count))
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) break learn/'s layering", file=sys.stderr)
        return 1
    print(f"check_layers: {sum(count.values())} files in {len(count)} rooms, no include runs back up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
