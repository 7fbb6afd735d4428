#!/usr/bin/env python3
"""Loss curve of a training run as a PNG (Python standard library only).

usage: plot_curve.py RUN_DIR OUT.png
Reads RUN_DIR/log.csv (step, loss, ...) and RUN_DIR/eval.csv (step, mean_exact_match, ...). Draws the
training loss on a log10 axis (black, left scale 1e-5 .. 1e1 in decades, grey grid lines) and the
in-distribution exact match (red dots, 0 at the bottom to 1 at the top). x = step, 0 .. last step.
"""
import csv
import math
import struct
import sys
import zlib


def write_png(path, w, h, px):
    raw = b"".join(b"\x00" + bytes(px[y * w * 3:(y + 1) * w * 3]) for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    run, out = sys.argv[1], sys.argv[2]
    rows = [r for r in csv.DictReader(open(run + "/log.csv")) if r["step"] != "step"]
    steps = [int(r["step"]) for r in rows]
    loss = [float(r["loss"]) for r in rows]
    try:
        ev = [(int(r["step"]), float(r["mean_exact_match"])) for r in csv.DictReader(open(run + "/eval.csv"))
              if r["step"] != "step"]
    except FileNotFoundError:
        ev = []
    W, H, L, B, T, R = 640, 360, 40, 20, 10, 10
    px = bytearray([255] * (W * H * 3))

    def put(x, y, c):
        if 0 <= x < W and 0 <= y < H:
            px[(y * W + x) * 3:(y * W + x) * 3 + 3] = bytes(c)

    smax = max(steps) if steps else 1
    lo, hi = -5.0, 1.0

    def X(s):
        return L + int((W - L - R - 1) * s / smax)

    def Y(v):  # log10 loss
        v = min(hi, max(lo, v))
        return T + int((H - T - B - 1) * (hi - v) / (hi - lo))

    for d in range(int(lo), int(hi) + 1):  # decade grid lines
        for x in range(L, W - R):
            put(x, Y(d), (210, 210, 210))
        for k in range(6):  # a tick mark 6 px wide at the left for each decade
            put(L - 1 - k, Y(d), (0, 0, 0))
    for y in range(T, H - B):
        put(L, y, (0, 0, 0))
    for x in range(L, W - R):
        put(x, H - B - 1, (0, 0, 0))
    prev = None
    for s, v in zip(steps, loss):
        p = (X(s), Y(math.log10(max(v, 1e-12))))
        if prev:  # straight segment
            n = max(abs(p[0] - prev[0]), abs(p[1] - prev[1]), 1)
            for i in range(n + 1):
                put(prev[0] + (p[0] - prev[0]) * i // n, prev[1] + (p[1] - prev[1]) * i // n, (0, 0, 0))
        prev = p
    for s, a in ev:
        y = T + int((H - T - B - 1) * (1 - a))
        for dx in range(-2, 3):
            for dy in range(-2, 3):
                put(X(s) + dx, y + dy, (220, 0, 0))
    write_png(out, W, H, px)
    print("wrote %s (%d loss points, %d evaluations)" % (out, len(steps), len(ev)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
