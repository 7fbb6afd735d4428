#!/usr/bin/env python3
"""Lambda windows of the whole claim as a PNG (Python standard library only).

usage: plot_lambda_windows.py lambda_windows.json OUT.png
Reads the report of `verify_construction --whole-claim --windows-table A:B --json FILE`.
Left panel: x = P (P1 = P2 = P), y = log10 lambda from 0 to 12 (grid line every decade); the
float64 window as a blue band, the float32 window as a red band (absent where empty), lambda_min
(real arithmetic; its window is [lambda_min, inf)) as black dots. Right panel: x = log10 N_max
(the largest claimed shape's token count), y = lambda_min from 0 to 25 (grid every 5); black dots,
and the grey line ln(N_max)/2 for comparison. Tick labels are digits only.
"""
import json
import math
import struct
import sys
import zlib

# 3x5 digit glyphs, rows top to bottom, bit 2 = left column
GLYPH = {"0": [7, 5, 5, 5, 7], "1": [2, 6, 2, 2, 7], "2": [7, 1, 7, 4, 7], "3": [7, 1, 7, 1, 7], "4": [5, 5, 7, 1, 1],
         "5": [7, 4, 7, 1, 7], "6": [7, 4, 7, 5, 7], "7": [7, 1, 1, 1, 1], "8": [7, 5, 7, 5, 7], "9": [7, 5, 7, 1, 7]}


def write_png(path, w, h, px):
    raw = b"".join(b"\x00" + bytes(px[y * w * 3:(y + 1) * w * 3]) for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray([255] * (w * h * 3))

    def dot(self, x, y, c):
        x, y = int(round(x)), int(round(y))
        if 0 <= x < self.w and 0 <= y < self.h:
            self.px[(y * self.w + x) * 3:(y * self.w + x) * 3 + 3] = bytes(c)

    def rect(self, x0, y0, x1, y1, c):
        for y in range(int(min(y0, y1)), int(max(y0, y1)) + 1):
            for x in range(int(min(x0, x1)), int(max(x0, x1)) + 1):
                self.dot(x, y, c)

    def line(self, x0, y0, x1, y1, c):
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for k in range(n + 1):
            self.dot(x0 + (x1 - x0) * k / n, y0 + (y1 - y0) * k / n, c)

    def text(self, x, y, s, c=(0, 0, 0)):
        for i, ch in enumerate(s):
            for r, bits in enumerate(GLYPH.get(ch, [0] * 5)):
                for b in range(3):
                    if bits >> (2 - b) & 1:
                        self.rect(x + 8 * i + 2 * b, y + 2 * r, x + 8 * i + 2 * b + 1, y + 2 * r + 1, c)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows = json.load(open(sys.argv[1]))["lambda_windows_table"]
    W, H = 960, 400
    cv = Canvas(W, H)
    grey, black, blue, red = (200, 200, 200), (0, 0, 0), (70, 110, 220), (220, 60, 60)
    # left panel: P vs log10 lambda
    L, R, T, B = 50, 450, 20, 360
    P0, P1 = rows[0]["P"], rows[-1]["P"]
    px = lambda p: L + (p - P0 + 0.5) / (P1 - P0 + 1) * (R - L)
    py = lambda lam: B - min(12.0, max(0.0, math.log10(lam))) / 12.0 * (B - T)
    for dec in range(13):
        cv.line(L, py(10 ** dec), R, py(10 ** dec), grey)
        cv.text(L - 22, py(10 ** dec) - 5, str(dec))
    cv.line(L, T, L, B, black)
    cv.line(L, B, R, B, black)
    bw = (R - L) / (P1 - P0 + 1) * 0.35
    for r in rows:
        x = px(r["P"])
        f64, f32 = r["float64"], r["float32"]
        if not f64["empty"]:
            cv.rect(x - bw, py(f64["lo"]), x - 1, py(f64["hi"] if f64["hi"] else 1e12), blue)
        if not f32["empty"]:
            cv.rect(x + 1, py(f32["lo"]), x + bw, py(f32["hi"] if f32["hi"] else 1e12), red)
        cv.rect(x - 2, py(r["lambda_min"]) - 2, x + 2, py(r["lambda_min"]) + 2, black)
        if r["P"] % 4 == 2:
            cv.text(x - 6, B + 8, str(r["P"]))
    # right panel: log10 N_max vs lambda_min
    L2, R2 = 540, 940
    n0, n1 = 0, 20
    qx = lambda n: L2 + (math.log10(n) - n0) / (n1 - n0) * (R2 - L2)
    qy = lambda lam: B - min(25.0, lam) / 25.0 * (B - T)
    for v in range(0, 26, 5):
        cv.line(L2, qy(v), R2, qy(v), grey)
        cv.text(L2 - 22, qy(v) - 5, str(v))
    for dec in range(0, 21, 5):
        cv.text(qx(10 ** dec) - 6, B + 8, str(dec))
    cv.line(L2, T, L2, B, black)
    cv.line(L2, B, R2, B, black)
    cv.line(qx(10), qy(math.log(10) / 2), qx(1e20), qy(math.log(1e20) / 2), grey)
    for r in rows:
        x, y = qx(r["N_max"]), qy(r["lambda_min"])
        cv.rect(x - 2, y - 2, x + 2, y + 2, black)
    write_png(sys.argv[2], W, H, cv.px)
    return 0


if __name__ == "__main__":
    sys.exit(main())
