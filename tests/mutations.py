"""The mutation families of the C++ fuzz targets (tests/test_fuzz.cpp) on bytes, shared by the Python fuzz
tests (test_python_loaders.py, test_sweep_inputs.py): flip a byte, overwrite or insert a token, erase,
truncate, duplicate a span, replace a number. Standard library only; the tests draw the mutations with
hypothesis: tuples (kind 0..6, position, length, token) as mutate() reads them."""

TOKENS = [b"0", b"1", b"-1", b"2", b"7", b"64.9", b"1e400", b"-0", b"2147483648", b"4294967296",
          b"4611686018427387904", b"9223372036854775807", b"9223372036854775808", b"18446744073709551616",
          b"1099511627776", b"16777216", b"null", b"true", b"[]", b"{}", b'"x"', b"[0,0]", b'"F64"', b'"I8"',
          b'"BF16"', b"NaN", b"8192", b"65536"]


def mutate(s, ms):
    """s (bytes) after the mutations ms, each (kind, pos, len, tok): kind 0 flip, 1 overwrite, 2 insert,
    3 erase, 4 truncate, 5 duplicate a span, 6 replace a number."""
    s = bytearray(s)
    for kind, pos, ln, tok in ms:
        n = len(s)
        p = pos % (n + 1)
        if kind == 0:
            if n:
                s[p % n] ^= ln % 255 + 1
        elif kind == 1:
            s[p:p + min(len(tok), n - p)] = tok
        elif kind == 2:
            s[p:p] = tok
        elif kind == 3:
            del s[p:p + ln]
        elif kind == 4:
            del s[p:]
        elif kind == 5:
            s[p:p] = s[p:p + ln]
        else:
            runs, i = [], 0
            while i < n:
                if not 48 <= s[i] <= 57:
                    i += 1
                    continue
                j = i
                while j < n and 48 <= s[j] <= 57:
                    j += 1
                runs.append((i, j))
                i = j
            if runs:
                a, b = runs[pos % len(runs)]
                s[a:b] = tok
    return bytes(s)
