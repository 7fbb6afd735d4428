"""The task format and its position IDs, as construct/src/format.cpp and learn/src/data.cpp define them
(docs/construction.md explains them); standard library only. tests/data/format_golden.json, written
by the C++ tool `format_ids`, holds sequences, IDs and samples these functions must reproduce.

    shape = Shape.make(2, 3, "minimal")                      # n, m, padding -> l = 3, N = 28
    tokens = build_sequence(parse_problem("57+48+96"), shape)
    decode(tokens)                                           # '$057+048+096=000>750>501>102'
    p1, p2 = position_ids(shape, s1=4, s2=2)                 # bi-level coupled IDs
    ex = make_example("57+48+96", "coupled", max_pos=(40, 40))   # what learn/ feeds its model

The sequence of m operands padded to l digits, N = (2m+1)(l+1) tokens:
    $ A_1 + A_2 + ... + A_m = B_0 > B_1 > ... > B_m          (then the model predicts '$' = EOS)
A_i most significant digit first; B_j = a_1 + ... + a_j reversed (least significant first); B_0 = 0.
Vocabulary "0123456789+=>$": token ids 0..13, '$' (13) is BOS and EOS.

Padding width l: theorem l = n + 1 + floor(log10 m) (Appendix D.3, verify_construction's default);
minimal l = digits of m (10^n - 1) (the paper's experiments and every learned model).

Coupled position IDs (Appendix D.4.2), offsets s1, s2 >= 1, 0-based index k:
    level 1 (significance): BOS 0; a digit of significance t (1 = least) s1 + t; every separator s1
    level 2 (which number): BOS 0; A_i and the '+' after it s2 + i - 1; '=' and B_0 s2;
                            the '>' before B_i and B_i s2 + i
The learned models' position modes (config.json model.pos_mode; learn/include/manyadd/learn/data.hpp):
    coupled   both levels above (two tables: pos_emb.0 = level 1, pos_emb.1 = level 2)
    digits    level 1 only
    absolute  one level: BOS 0, index k >= 1 -> s1 + k - 1
    none      no position IDs (NoPE)
A learned model writes each problem in its own shape: n = its longest operand, m = its operand count,
minimal padding. Training draws s1 in [1, max_offset1], s2 in [1, max_offset2] per sample; evaluation
uses s1 = s2 = 1.

Samplers with the C++ tools' exact draws (a seed gives the instances `evaluate`, `dump_attention` and
`compare_attention` use): Rng (std::mt19937_64 and the tools' unbiased uniform draw), sample_TA,
sample_SA, cell_seed.
"""
from .files import InputError

__all__ = ["VOCAB", "PLUS", "EQ", "ARROW", "DOLLAR", "BOS", "EOS", "POS_MODES", "encode", "decode", "width",
           "width_theorem", "width_minimal", "Shape", "parse_problem", "build_sequence", "parse_sequence",
           "position_ids", "position_ids_for", "pos_levels", "max_offset1", "max_offset2", "shape_of",
           "Example", "make_example", "Rng", "random_operand", "sample_TA", "sample_SA", "cell_seed",
           "InputError"]

VOCAB = "0123456789+=>$"
PLUS, EQ, ARROW, DOLLAR = 10, 11, 12, 13
BOS = EOS = DOLLAR
POS_MODES = ("coupled", "digits", "absolute", "none")
PADDINGS = ("theorem", "minimal")
# The C++ shape limits (construct/src/format.cpp): every index and ID fits 32/64-bit integers.
MAX_DIGITS = MAX_OPERANDS = 100_000_000
_M64 = (1 << 64) - 1


def encode(text):
    """Token ids of a string over the vocabulary (InputError on any other character)."""
    out = []
    for c in text:
        i = VOCAB.find(c)
        if i < 0 or len(c) != 1:
            raise InputError("character %r is not in the vocabulary 0-9 + = > $" % c)
        out.append(i)
    return out


def decode(tokens):
    """The string of token ids (ints, or anything with .tolist())."""
    if hasattr(tokens, "tolist"):
        tokens = tokens.tolist()
    try:
        return "".join(VOCAB[int(t)] if 0 <= int(t) < len(VOCAB) else _bad_token(t) for t in tokens)
    except TypeError:
        raise InputError("decode: expected a flat sequence of token ids") from None


def _bad_token(t):
    raise InputError("token id %d outside [0, %d)" % (int(t), len(VOCAB)))


def width_theorem(n, m):
    return n + 1 + len(str(m)) - 1


def width_minimal(n, m):
    """Digits of m (10^n - 1), without forming the number: with d = digits(m) it lies in
    [10^(n+d-2), 10^(n+d)) and reaches 10^(n+d-1) iff (m - 10^(d-1)) 10^n >= m (format.cpp)."""
    d = len(str(m))
    lead = m - 10 ** (d - 1)
    if lead == 0:
        reaches = False
    elif n >= d:
        reaches = True
    else:
        reaches = lead * 10 ** n >= m
    return n + d - 1 + (1 if reaches else 0)


def width(padding, n, m):
    if padding not in PADDINGS:
        raise InputError("padding rule %r unknown (theorem|minimal)" % (padding,))
    return width_theorem(n, m) if padding == "theorem" else width_minimal(n, m)


def _int(name, v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError("%s must be an integer (got %r)" % (name, v))
    return v


class Shape:
    """m operands of at most n digits, every number padded to l digits (construct's Shape)."""

    __slots__ = ("n", "m", "l", "padding")

    def __init__(self, n, m, l, padding):
        self.n, self.m, self.l, self.padding = n, m, l, padding

    @classmethod
    def make(cls, n, m, padding="theorem"):
        n, m = _int("n", n), _int("m", m)
        if n < 1:
            raise InputError("n must be >= 1 (got %d)" % n)
        if m < 1:
            raise InputError("m must be >= 1 (got %d)" % m)
        if n > MAX_DIGITS or m > MAX_OPERANDS:
            raise InputError("shape (n=%d, m=%d) is above the supported %d" % (n, m, MAX_DIGITS))
        return cls(n, m, width(padding, n, m), padding)

    @property
    def N(self):
        """Sequence length (2m+1)(l+1)."""
        return (2 * self.m + 1) * (self.l + 1)

    @property
    def eq_index(self):
        """0-based index of '=': the first prediction of the response is made there."""
        return self.m * (self.l + 1)

    @property
    def response_len(self):
        """Predictions that count: N - eq_index (the response after '=' and the final EOS)."""
        return self.N - self.eq_index

    def __eq__(self, other):
        return isinstance(other, Shape) and (self.n, self.m, self.l, self.padding) == (
            other.n, other.m, other.l, other.padding)

    def __repr__(self):
        return "Shape(n=%d, m=%d, l=%d, padding=%r, N=%d)" % (self.n, self.m, self.l, self.padding, self.N)


def parse_problem(text):
    """'57+48+96' -> ['57', '48', '96'] (leading zeros stripped, spaces ignored), as parse_problem in C++;
    a list/tuple of operands (strings or non-negative ints) is normalized the same way."""
    if isinstance(text, (list, tuple)):
        ops = [str(o) if isinstance(o, int) and not isinstance(o, bool) and o >= 0 else o for o in text]
        if not ops or not all(isinstance(o, str) and o.isdigit() and o.isascii() for o in ops):
            raise InputError("problem %r: operands must be non-negative integers or digit strings" % (text,))
        return [o.lstrip("0") or "0" for o in ops]
    if not isinstance(text, str):
        raise InputError("problem must be a string like '57+48+96' (got %r)" % (text,))
    ops, cur = [], ""
    for c in text:
        if c == "+":
            if not cur:
                raise InputError("problem %r: empty operand (expected e.g. 57+48+96)" % text)
            ops.append(cur.lstrip("0") or "0")
            cur = ""
        elif "0" <= c <= "9":
            cur += c
        elif c == " ":
            continue
        else:
            raise InputError("problem %r: unexpected character %r (digits and '+' only)" % (text, c))
    if not cur:
        raise InputError("problem %r: empty operand (expected e.g. 57+48+96)" % text)
    ops.append(cur.lstrip("0") or "0")
    return ops


def build_sequence(problem, shape):
    """The N token ids of the teacher-forced sequence of `problem` (operand strings or '57+48+96') in
    `shape` (exactly shape.m operands of at most shape.n digits; every partial sum must fit l digits)."""
    ops = parse_problem(problem)
    m, l = shape.m, shape.l
    if len(ops) != m:
        raise InputError("problem has %d operands, shape has m = %d" % (len(ops), m))
    for o in ops:
        if len(o) > shape.n:
            raise InputError("operand '%s' has %d digits, shape has n = %d" % (o, len(o), shape.n))
    seq = [DOLLAR]
    for i, o in enumerate(ops):
        seq += [int(c) for c in o.zfill(l)]
        seq.append(PLUS if i + 1 < m else EQ)
    total = 0
    seq += [0] * l  # B_0
    for j, o in enumerate(ops):
        total += int(o)
        digits = str(total)
        if len(digits) > l:
            raise InputError("partial sum b_%d does not fit in l = %d digits" % (j + 1, l))
        seq.append(ARROW)
        seq += [int(c) for c in reversed(digits.zfill(l))]
    return seq


def parse_sequence(tokens):
    """Inverse of build_sequence: (m, l, operands, partial sums b_0..b_m) of a well-formed sequence (token
    ids or a string); InputError naming what is wrong otherwise."""
    toks = encode(tokens) if isinstance(tokens, str) else [int(t) for t in (
        tokens.tolist() if hasattr(tokens, "tolist") else tokens)]
    text = decode(toks)

    def bad(why):
        return InputError("malformed sequence (%s): %s" % (why, text))
    if len(toks) < 3 or toks[0] != DOLLAR:
        raise bad("must start with '$'")
    k = 1
    while k < len(toks) and toks[k] < 10:
        k += 1
    if k == len(toks) or k == 1:
        raise bad("no operand")
    l = k - 1
    N = len(toks)
    if N % (l + 1) or (N // (l + 1)) % 2 == 0:
        raise bad("length is not (2m+1)(l+1)")
    m = (N // (l + 1) - 1) // 2

    def number(start, reverse):
        d = toks[start:start + l]
        if any(t > 9 for t in d):
            raise bad("separator inside a number")
        s = "".join(str(t) for t in (reversed(d) if reverse else d))
        return s.lstrip("0") or "0"
    ops, sums = [], []
    for i in range(m):
        start = 1 + i * (l + 1)
        ops.append(number(start, False))
        if toks[start + l] != (PLUS if i + 1 < m else EQ):
            raise bad("expected '+' or '=' after an operand")
    for j in range(m + 1):
        start = (m + j) * (l + 1) + 1
        if j > 0 and toks[start - 1] != ARROW:
            raise bad("expected '>' before a partial sum")
        sums.append(number(start, True))
    return m, l, ops, sums


def position_ids(shape, s1=1, s2=1):
    """The coupled IDs (p1, p2), two lists of N ints (format.cpp position_id_at)."""
    s1, s2 = _int("s1", s1), _int("s2", s2)
    if s1 < 1 or s2 < 1:
        raise InputError("offsets must be >= 1 (got s1=%d, s2=%d)" % (s1, s2))
    l, m, L = shape.l, shape.m, shape.l + 1
    p1, p2 = [0], [0]  # BOS
    for i in range(1, m + 1):  # A_i: significance l .. 1, then its separator
        p1 += [s1 + (l - r) for r in range(l)] + [s1]
        p2 += [s2 + i - 1] * l + [s2 if i == m else s2 + i - 1]  # '=' shares B_0's level-2 ID
    for j in range(m + 1):  # block j: its separator ('=' is the query's last token for j = 0), digits 1..l
        if j > 0:
            p1.append(s1)
            p2.append(s2 + j)
        p1 += [s1 + t for t in range(1, L)]
        p2 += [s2 + j] * l
    return p1, p2


def pos_levels(mode):
    """Position tables a learned model of this mode has (0, 1 or 2)."""
    if mode not in POS_MODES:
        raise InputError("position mode %r unknown (%s)" % (mode, "|".join(POS_MODES)))
    return {"coupled": 2, "digits": 1, "absolute": 1, "none": 0}[mode]


def position_ids_for(shape, mode, s1=1, s2=1):
    """The learned models' IDs: a list of pos_levels(mode) lists of N ints (learn/src/data.cpp)."""
    levels = pos_levels(mode)
    if mode == "absolute":
        s1 = _int("s1", s1)
        if s1 < 1:
            raise InputError("offset s1 must be >= 1 (got %d)" % s1)
        return [[0] + [s1 + k - 1 for k in range(1, shape.N)]]
    if levels == 0:
        return []
    return list(position_ids(shape, s1, s2))[:levels]


def max_offset1(mode, max_pos1, shape):
    """Largest admissible s1 (< 1: the shape does not fit the model): coupled/digits max_pos1 - l,
    absolute max_pos1 - N + 2, none 1."""
    pos_levels(mode)
    if mode in ("coupled", "digits"):
        return max_pos1 - shape.l
    return max_pos1 - shape.N + 2 if mode == "absolute" else 1


def max_offset2(mode, max_pos2, shape):
    pos_levels(mode)
    return max_pos2 - shape.m if mode == "coupled" else 1


def shape_of(problem):
    """The shape a learned model writes a problem in: n = longest operand, m = count, minimal padding."""
    ops = parse_problem(problem)
    return Shape.make(max(len(o) for o in ops), len(ops), "minimal")


class Example:
    """A learned model's input: tokens (N), pos (one list of N IDs per level), targets (N: the next token
    from '=' on, EOS after the last token, -1 where no loss is taken), and the shape and offsets."""

    __slots__ = ("tokens", "pos", "targets", "shape", "s1", "s2")

    def __init__(self, tokens, pos, targets, shape, s1, s2):
        self.tokens, self.pos, self.targets, self.shape, self.s1, self.s2 = tokens, pos, targets, shape, s1, s2

    def __repr__(self):
        return "Example(%s, s1=%d, s2=%d, %r)" % (decode(self.tokens), self.s1, self.s2, self.shape)


def make_example(problem, mode, max_pos=None, s1=1, s2=1):
    """learn's make_example: the problem in its own shape (shape_of), IDs of `mode` at offsets (s1, s2),
    targets. max_pos = (max_pos1, max_pos2) checks the IDs fit the model's tables (InputError if not);
    None skips the check. Offsets a mode does not use are not checked (s2 outside coupled, both for none)."""
    shape = shape_of(problem)
    if max_pos is not None:
        bad1 = mode != "none" and not (1 <= s1 <= max_offset1(mode, max_pos[0], shape))
        bad2 = mode == "coupled" and not (1 <= s2 <= max_offset2(mode, max_pos[1], shape))
        if bad1 or bad2:
            raise InputError("shape (n=%d, m=%d, l=%d) with offsets (%d, %d) needs position IDs beyond the model's "
                             "max_pos1=%d / max_pos2=%d" % (shape.n, shape.m, shape.l, s1, s2, max_pos[0], max_pos[1]))
    tokens = build_sequence(problem, shape)
    pos = position_ids_for(shape, mode, s1, s2)
    eq = shape.eq_index
    targets = [-1] * eq + tokens[eq + 1:] + [EOS]
    return Example(tokens, pos, targets, shape, s1, s2)


class Rng:
    """The tools' generator: std::mt19937_64 seeded with `seed`, and Rng::uniform (format.cpp), an
    unbiased draw in [lo, hi] by rejection of the top partial range, so a seed gives the C++ samples."""

    _N, _M = 312, 156

    def __init__(self, seed):
        seed = _int("seed", seed) & _M64
        mt = [seed]
        for i in range(1, self._N):
            prev = mt[-1]
            mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & _M64)
        self._mt, self._i = mt, self._N

    def _twist(self):
        mt, N, M = self._mt, self._N, self._M
        for i in range(N):
            y = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % N] & 0x7FFFFFFF)
            mt[i] = mt[(i + M) % N] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
        self._i = 0

    def next(self):
        """The next 64-bit output of std::mt19937_64."""
        if self._i >= self._N:
            self._twist()
        x = self._mt[self._i]
        self._i += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000
        x ^= (x << 37) & 0xFFF7EEE000000000
        return (x ^ (x >> 43)) & _M64

    def uniform(self, lo, hi):
        span = (hi - lo) & _M64
        if span == _M64:
            return self.next()
        rng = span + 1
        limit = _M64 - (_M64 % rng)
        while True:
            x = self.next()
            if x < limit:
                return lo + x % rng


def random_operand(rng, digits):
    """A 1-digit operand is uniform in [0, 9]; a k-digit one (k >= 2) never starts with 0."""
    if digits == 1:
        return str(rng.uniform(0, 9))
    return str(rng.uniform(1, 9)) + "".join(str(rng.uniform(0, 9)) for _ in range(digits - 1))


def sample_TA(rng, n, m):
    """TA(n, m): exactly m operands of exactly n digits."""
    return [random_operand(rng, n) for _ in range(m)]


def sample_SA(rng, n, m, count):
    """SA(n, m) in two chunks (Sec. 4.2; the first gets the extra problem of an odd count): operand count
    uniform in [2, m]; first chunk each operand's length uniform in [1, n], second chunk one shared length."""
    if n < 1 or m < 2:
        raise InputError("SA(n, m) needs n >= 1 and m >= 2 (got %d, %d)" % (n, m))
    out, first = [], (count + 1) // 2
    for s in range(count):
        ops = rng.uniform(2, m)
        if s < first:
            out.append([random_operand(rng, rng.uniform(1, n)) for _ in range(ops)])
        else:
            length = rng.uniform(1, n)
            out.append([random_operand(rng, length) for _ in range(ops)])
    return out


def cell_seed(seed, n, m):
    """The seed of TA(n, m)'s samples in evaluate / dump_attention / compare_attention (learn/src/eval.cpp):
    `sample_TA(Rng(cell_seed(seed, n, m)), n, m)` repeated gives their instances in order (seed 12345
    is the tools' default)."""
    z = (seed * 0x9E3779B97F4A7C15 + n * 1000003 + m) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)
