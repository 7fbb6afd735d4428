"""The task format and its position IDs, as construct/src/format.cpp and learn/src/tasks/data.cpp define them
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
The learned models' position modes (config.json model.pos_mode; learn/include/manyadd/learn/tasks/data.hpp):
    coupled   both levels above (two tables: pos_emb.0 = level 1, pos_emb.1 = level 2)
    digits    level 1 only
    absolute  one level: BOS 0, index k >= 1 -> s1 + k - 1
    none      no position IDs (NoPE)
    abacus    one level from the tokens alone (McLeish et al. 2024, Sec. 3.1): the t-th token of every
              run of digit tokens beta + t - 1 (beta = s1), every other token 0 (abacus_ids)
    fire, rope  no position IDs: the attention reads the token indices (FIRE's bias, RoPE's rotation)
A learned model writes each problem in its own shape: n = its longest operand, m = its operand count,
minimal padding. Training draws s1 in [1, max_offset1], s2 in [1, max_offset2] per sample; evaluation
uses s1 = s2 = 1.

Samplers with the C++ tools' exact draws (a seed gives the instances `evaluate`, `dump_attention` and
`compare_attention` use): Rng (std::mt19937_64 and the tools' unbiased uniform draw), sample_TA,
sample_SA, cell_seed.

The other tasks (learn/include/manyadd/learn/tasks/task.hpp, learn/README.md "Tasks"), written here from
their papers' definitions with Python integers (the C++ writers do schoolbook digit arithmetic):
    w = task_write("multiplication", task_parse("multiplication", "37*925"))
    decode(w.tokens)        # '$37*925=581+470+333=58100>52900>52243' (Figure 8b)
    w.rel                   # per coupling level, per token: ID - offset, or -1 where the ID is 0
    task_position_ids(w, "coupled3", (1, 1, 1))   # Figure 8b's three rows (with BOS 0 first)
TASKS names them; task_read reads a sequence back, task_sample_cell / task_sample_train draw the C++
samples, task_extent gives a cell's longest sequence and spans, make_task_example learn's example.
"""
from .files import InputError

__all__ = ["VOCAB", "PLUS", "EQ", "ARROW", "DOLLAR", "BOS", "EOS", "POS_MODES", "ALL_POS_MODES", "encode", "decode", "width",
           "width_theorem", "width_minimal", "Shape", "parse_problem", "build_sequence", "parse_sequence",
           "position_ids", "position_ids_for", "pos_levels", "pos_tables", "max_offset1", "max_offset2", "shape_of",
           "Example", "make_example", "Rng", "random_operand", "sample_TA", "sample_SA", "cell_seed",
           "InputError", "VOCAB_TASKS", "STAR", "vocabulary", "TASKS", "Written", "task_parse", "task_to_string",
           "task_write", "task_read", "task_reference", "task_levels", "task_vocab", "task_extent",
           "task_position_ids", "task_sample_cell", "task_sample_train", "make_task_example"]

VOCAB = "0123456789+=>$"
VOCAB_TASKS = VOCAB + "*"  # token 14 '*': multiplication (learn's other tasks)
PLUS, EQ, ARROW, DOLLAR, STAR = 10, 11, 12, 13, 14
BOS = EOS = DOLLAR
POS_MODES = ("coupled", "digits", "absolute", "none")  # the modes of an addition model
# and coupled3: three position tables, multiplication's tri-level coupling (learn/ takes every one)
ALL_POS_MODES = POS_MODES + ("coupled3", "abacus", "fire", "rope", "coupled_rel")  # fire, rope: no IDs (token indices)
# coupled_rel: the coupled IDs of both levels, read as a relative score bias (no table: pos_tables 0)
PADDINGS = ("theorem", "minimal")
# The C++ shape limits (construct/src/format.cpp): every index and ID fits 32/64-bit integers.
MAX_DIGITS = MAX_OPERANDS = 100_000_000
_M64 = (1 << 64) - 1


def vocabulary(vocab):
    """The first `vocab` characters of "0123456789+=>$*" (14 or 15), as config.json's model.vocabulary."""
    if vocab not in (14, 15):
        raise InputError("a vocabulary has 14 or 15 tokens (got %r)" % (vocab,))
    return VOCAB_TASKS[:vocab]


def encode(text):
    """Token ids of a string over the vocabulary, '*' included (InputError on any other character)."""
    out = []
    for c in text:
        i = VOCAB_TASKS.find(c)
        if i < 0 or len(c) != 1:
            raise InputError("character %r is not in the vocabulary 0-9 + = > $ *" % c)
        out.append(i)
    return out


def decode(tokens):
    """The string of token ids (ints, or anything with .tolist())."""
    if hasattr(tokens, "tolist"):
        tokens = tokens.tolist()
    try:
        return "".join(VOCAB_TASKS[int(t)] if 0 <= int(t) < len(VOCAB_TASKS) else _bad_token(t) for t in tokens)
    except TypeError:
        raise InputError("decode: expected a flat sequence of token ids") from None


def _bad_token(t):
    raise InputError("token id %d outside [0, %d)" % (int(t), len(VOCAB_TASKS)))


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
    """Levels of position IDs a learned model of this mode reads (0, 1, 2 or 3)."""
    if mode not in ALL_POS_MODES:
        raise InputError("position mode %r unknown (%s)" % (mode, "|".join(ALL_POS_MODES)))
    return {"coupled": 2, "digits": 1, "absolute": 1, "none": 0, "coupled3": 3, "abacus": 1, "fire": 0, "rope": 0,
            "coupled_rel": 2}[mode]


def pos_tables(mode):
    """Position tables a learned model of this mode has: its levels, but none for coupled_rel (its IDs
    reach the scores as a relative bias, learn/src/decoder/model_config.cpp pos_tables)."""
    return 0 if mode == "coupled_rel" else pos_levels(mode)


def abacus_ids(tokens, beta):
    """Abacus IDs (learn/src/tasks/data.cpp abacus_ids): every maximal run of digit tokens numbered beta,
    beta + 1, ... from its first token; every other token 0."""
    beta = _int("beta", beta)
    if beta < 1:
        raise InputError("abacus offset beta must be >= 1 (got %d)" % beta)
    out, t = [], 0
    for tok in tokens:
        t = t + 1 if tok <= 9 else 0
        out.append(beta + t - 1 if t else 0)
    return out


def _longest_digit_run(tokens):
    best, t = 0, 0
    for tok in tokens:
        t = t + 1 if tok <= 9 else 0
        best = max(best, t)
    return best


def position_ids_for(shape, mode, s1=1, s2=1):
    """The learned models' IDs: a list of pos_levels(mode) lists of N ints (learn/src/tasks/data.cpp)."""
    levels = pos_levels(mode)
    if mode == "absolute":
        s1 = _int("s1", s1)
        if s1 < 1:
            raise InputError("offset s1 must be >= 1 (got %d)" % s1)
        return [[0] + [s1 + k - 1 for k in range(1, shape.N)]]
    if mode == "abacus":  # the digit layout is the shape's: any problem of it gives the same IDs
        return [abacus_ids(build_sequence("+".join(["9" * shape.n] * shape.m), shape), s1)]
    if levels == 0:
        return []
    if levels == 3:
        raise InputError("pos_mode coupled3 reads three position levels, addition couples two")
    return list(position_ids(shape, s1, s2))[:levels]


def max_offset1(mode, max_pos1, shape):
    """Largest admissible s1 (< 1: the shape does not fit the model): coupled/digits max_pos1 - l,
    absolute max_pos1 - N + 2, none 1."""
    pos_levels(mode)
    if mode in ("coupled", "digits", "coupled_rel"):
        return max_pos1 - shape.l
    if mode == "abacus":
        return max_pos1 - _longest_digit_run(build_sequence("+".join(["9" * shape.n] * shape.m), shape)) + 1
    return max_pos1 - shape.N + 2 if mode == "absolute" else 1


def max_offset2(mode, max_pos2, shape):
    pos_levels(mode)
    return max_pos2 - shape.m if mode in ("coupled", "coupled_rel") else 1


def shape_of(problem):
    """The shape a learned model writes a problem in: n = longest operand, m = count, minimal padding."""
    ops = parse_problem(problem)
    return Shape.make(max(len(o) for o in ops), len(ops), "minimal")


class Example:
    """A learned model's input: tokens (N), pos (one list of N IDs per level), targets (N: the next token
    from '=' on, EOS after the last token, -1 where no loss is taken), and the shape and offsets."""

    __slots__ = ("tokens", "pos", "targets", "shape", "s1", "s2", "answer_span")

    def __init__(self, tokens, pos, targets, shape, s1, s2):
        self.tokens, self.pos, self.targets, self.shape, self.s1, self.s2 = tokens, pos, targets, shape, s1, s2
        self.answer_span = None  # make_task_example: the final answer's tokens [begin, end)

    def __repr__(self):
        return "Example(%s, s1=%d, s2=%d, %r)" % (decode(self.tokens), self.s1, self.s2, self.shape)



def make_example(problem, mode, max_pos=None, s1=1, s2=1):
    """learn's make_example: the problem in its own shape (shape_of), IDs of `mode` at offsets (s1, s2),
    targets. max_pos = (max_pos1, max_pos2) checks the IDs fit the model's tables (InputError if not);
    None skips the check. Offsets a mode does not use are not checked (s2 outside coupled, both without IDs:
    none, fire, rope)."""
    shape = shape_of(problem)
    if max_pos is not None:
        bad1 = pos_levels(mode) >= 1 and not (1 <= s1 <= max_offset1(mode, max_pos[0], shape))
        bad2 = mode in ("coupled", "coupled_rel") and not (1 <= s2 <= max_offset2(mode, max_pos[1], shape))
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
    """The seed of TA(n, m)'s samples in evaluate / dump_attention / compare_attention (learn/src/runs/eval.cpp):
    `sample_TA(Rng(cell_seed(seed, n, m)), n, m)` repeated gives their instances in order (seed 12345
    is the tools' default)."""
    z = (seed * 0x9E3779B97F4A7C15 + n * 1000003 + m) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


# ---- the tasks (learn/include/manyadd/learn/tasks/task.hpp) ----------------------------------------------

TASKS = ("addition", "addition-noscratch", "addition-2op", "parity", "parity-noscratch", "multiplication",
         "multiplication-noscratch")
_LEVELS = {"addition": 2, "multiplication": 3}
_MAX_FACTOR_DIGITS = 1000
_MAX_2OP_DIGITS = 100_000
_MAX_BITS = 1_000_000


def _check_task(task):
    if task not in TASKS:
        raise InputError("task %r unknown (%s)" % (task, "|".join(TASKS)))
    return task


def task_levels(task):
    """Position Coupling levels of a task: addition 2, multiplication 3, the others 1."""
    return _LEVELS.get(_check_task(task), 1)


def task_vocab(task):
    """Tokens a task needs: 15 ('*') for multiplication, 14 otherwise."""
    return 15 if _check_task(task).startswith("multiplication") else 14


class Written:
    """One instance in a task's format: tokens (BOS first; EOS follows as the last target), eq (index of
    the query's last token '='), answer_span (the final answer's tokens [begin, end)), rel (per coupling
    level, per token: ID - offset, or -1 where the ID is 0), span (per level: offsets in [1, max_pos - span])."""

    __slots__ = ("tokens", "eq", "answer_span", "rel", "span")

    def __init__(self, tokens, eq, answer_span, rel, span):
        self.tokens, self.eq, self.answer_span, self.rel, self.span = tokens, eq, answer_span, rel, span

    def __repr__(self):
        return "Written(%s, eq=%d, answer=%s)" % (decode(self.tokens), self.eq, self.answer_span)


def _operands(text, sep, example, count):
    if not isinstance(text, str):
        raise InputError("problem must be a string like %r (got %r)" % (example, text))
    ops, cur = [], ""
    for c in text + sep:
        if c == sep:
            if not cur:
                raise InputError("problem %r: empty operand (expected e.g. %s)" % (text, example))
            ops.append(cur.lstrip("0") or "0")
            cur = ""
        elif "0" <= c <= "9":
            cur += c
        elif c != " ":
            raise InputError("problem %r: unexpected character %r (expected e.g. %s)" % (text, c, example))
    if len(ops) != count:
        raise InputError("problem %r: needs exactly two %s" % (text, "factors" if sep == "*" else "operands"))
    return ops


def task_parse(task, text):
    """The operands of a problem in a task's notation: '57+48+96', '57+48', '0101', '37*925'."""
    task = _check_task(task)
    if task in ("addition", "addition-noscratch"):
        ops = parse_problem(text)
        if len(ops) < 2:
            raise InputError("problem %r: needs at least two operands" % (text,))
        return ops
    if task == "addition-2op":
        return _operands(text, "+", "57+48", 2)
    if task.startswith("multiplication"):
        ops = _operands(text, "*", "37*925", 2)
        if max(len(o) for o in ops) > _MAX_FACTOR_DIGITS:
            raise InputError("a factor has more than %d digits" % _MAX_FACTOR_DIGITS)
        return ops
    if not isinstance(text, str):
        raise InputError("a parity query is a bit string (got %r)" % (text,))
    bits = text.replace(" ", "")
    if not bits or set(bits) - {"0", "1"}:
        raise InputError("problem %r: a parity query is a bit string (e.g. 0101)" % (text,))
    return [bits]


def task_to_string(task, ops):
    task = _check_task(task)
    if task.startswith("parity"):
        return ops[0]
    return ("*" if task.startswith("multiplication") else "+").join(ops)


def _check_numbers(ops, count, limit, what):
    if len(ops) != count:
        raise InputError("%s: exactly %d per instance" % (what, count))
    for o in ops:
        if not (isinstance(o, str) and o.isdigit() and o.isascii()) or (len(o) > 1 and o[0] == "0"):
            raise InputError("%s %r is not a decimal number without leading zeros" % (what, o))
        if len(o) > limit:
            raise InputError("%s %r has more than %d digits" % (what, o, limit))


def task_write(task, ops):
    """The instance `ops` (task_parse's operands) written in the task's format, from the task's definition."""
    task = _check_task(task)
    if task == "addition":
        shape = shape_of(ops)
        p1, p2 = position_ids(shape, 1, 1)
        return Written(build_sequence(ops, shape), shape.eq_index, (shape.N - shape.l, shape.N),
                       [[i - 1 for i in p1], [i - 1 for i in p2]], [shape.l, shape.m])
    if task == "addition-noscratch":
        ops = parse_problem(list(ops))
        n, m = max(len(o) for o in ops), len(ops)
        l = width_minimal(n, m)
        toks, rel = [DOLLAR], [-1]
        for i, o in enumerate(ops):
            toks += [int(c) for c in o.zfill(l)] + [PLUS if i + 1 < m else EQ]
            rel += [l - r for r in range(l)] + [0]
        eq = len(toks) - 1
        total = str(sum(int(o) for o in ops))
        if len(total) > l:
            raise InputError("the sum does not fit %d digits" % l)
        toks += [int(c) for c in reversed(total.zfill(l))]
        rel += list(range(1, l + 1))
        return Written(toks, eq, (len(toks) - l, len(toks)), [rel], [l])
    if task == "addition-2op":
        _check_numbers(ops, 2, _MAX_2OP_DIGITS, "operand")
        a, b = ops
        s = str(int(a) + int(b))
        toks, rel = [DOLLAR], [-1]
        for i, x in enumerate((a, b)):
            toks += [int(c) for c in reversed(x)] + [PLUS if i == 0 else EQ]
            rel += list(range(len(x))) + [-1]
        eq = len(toks) - 1
        toks += [int(c) for c in reversed(s)]
        rel += list(range(len(s)))
        return Written(toks, eq, (len(toks) - len(s), len(toks)), [rel], [max(len(a), len(b), len(s)) - 1])
    if task.startswith("parity"):
        if len(ops) != 1 or not isinstance(ops[0], str) or not ops[0] or set(ops[0]) - {"0", "1"}:
            raise InputError("%s: one bit string per instance (got %r)" % (task, ops))
        x = [int(c) for c in ops[0]]
        n = len(x)
        if n > _MAX_BITS:
            raise InputError("the query has more than %d bits" % _MAX_BITS)
        if task == "parity":
            y = [sum(x[:k + 1]) % 2 for k in range(n)]  # y_k: the parity of x_1..x_k
            toks = [DOLLAR] + x + [EQ] + y
            return Written(toks, n + 1, (2 * n + 1, 2 * n + 2),
                           [[-1] + list(range(1, n + 1)) + [0] + list(range(1, n + 1))], [n])
        toks = [DOLLAR] + x + [EQ, sum(x) % 2]
        return Written(toks, n + 1, (n + 2, n + 3), [[-1] + [0] * n + [1, 0]], [1])
    _check_numbers(ops, 2, _MAX_FACTOR_DIGITS, "factor")
    A, B = ops
    M, N = len(A), len(B)
    toks = [DOLLAR] + [int(c) for c in A] + [STAR] + [int(c) for c in B] + [EQ]
    if task == "multiplication-noscratch":
        c = str(int(A) * int(B)).zfill(M + N)
        toks += [int(d) for d in reversed(c)]
        rel = [-1] + list(range(M, 0, -1)) + [0] + list(range(N, 0, -1)) + [0] + list(range(1, M + N + 1))
        return Written(toks, M + N + 2, (len(toks) - M - N, len(toks)), [rel], [M + N])
    # Figure 8b: S_j = A b_j (b_j the j-th least significant digit of B), C_j = sum_{k <= j} S_k 10^(k-1).
    r1 = [-1] + list(range(M, 0, -1)) + [-1] * (N + 1) + [0]
    r2 = [-1] * (M + 2) + list(range(N - 1, -1, -1)) + [0]
    r3 = [-1] * (M + N + 2) + [0]
    acc = 0
    sums = []
    for j in range(1, N + 1):
        if j > 1:
            toks.append(PLUS)
            r1.append(0), r2.append(j - 1), r3.append(j - 1)
        s = int(A) * int(B[N - j])
        acc += s * 10 ** (j - 1)
        sums.append(acc)
        toks += [int(d) for d in reversed(str(s).zfill(M + 1))]
        r1 += list(range(1, M + 2))
        r2 += [j - 1] * (M + 1)
        r3 += [j - 1 + k for k in range(1, M + 2)]
    for j in range(1, N + 1):
        toks.append(EQ if j == 1 else ARROW)
        r1.append(-1), r2.append(j - 1), r3.append(0)
        toks += [int(d) for d in reversed(str(sums[j - 1]).zfill(M + N))]
        r1 += [-1] * (M + N)
        r2 += [j - 1] * (M + N)
        r3 += list(range(1, M + N + 1))
    return Written(toks, M + N + 2, (len(toks) - M - N, len(toks)), [r1, r2, r3], [max(M + 1, N), N - 1, M + N])


def task_reference(task, ops):
    """The answer from the problem alone: the sum, the product, or the parity."""
    task = _check_task(task)
    if task.startswith("parity"):
        return str(ops[0].count("1") % 2)
    if task.startswith("multiplication"):
        return str(int(ops[0]) * int(ops[1]))
    return str(sum(int(o) for o in ops))


def task_read(task, tokens):
    """(answer, consistent) of a whole sequence: the final answer as a decimal string, and whether the
    sequence is the one task_write writes for its own query (the scratchpad checked with it)."""
    task = _check_task(task)
    toks = encode(tokens) if isinstance(tokens, str) else [int(t) for t in tokens]
    text = decode(toks)
    eq = text.index("=") if "=" in text else -1
    if not text.startswith("$") or eq < 0:
        raise InputError("malformed %s sequence: %s" % (task, text))
    query = text[1:eq]
    if task == "addition":
        m, l, ops, sums = parse_sequence(toks)
    elif task.startswith("parity"):
        ops = [query]
    else:
        sep = "*" if task.startswith("multiplication") else "+"
        ops = [o.lstrip("0") or "0" for o in query.split(sep)] if task != "addition-2op" else \
            ["".join(reversed(o)) for o in query.split(sep)]
    try:
        if task == "addition-2op":
            ops = [o.lstrip("0") or "0" for o in ops]
        w = task_write(task, ops)
    except (InputError, ValueError):
        raise InputError("malformed %s sequence: %s" % (task, text)) from None
    b, e = w.answer_span
    if len(toks) != len(w.tokens) or toks[:w.eq + 1] != w.tokens[:w.eq + 1]:
        raise InputError("malformed %s sequence: %s" % (task, text))
    ans = decode(toks[b:e])
    answer = ans if task.startswith("parity") else ("".join(reversed(ans)).lstrip("0") or "0")
    return answer, toks == w.tokens


def task_extent(task, n, m=1):
    """(T, spans) of cell (n, m): its longest sequence and the largest span of every level."""
    task = _check_task(task)
    if task == "addition":
        s = Shape.make(n, m, "minimal")
        return s.N, [s.l, s.m]
    if task == "addition-noscratch":
        l = width_minimal(n, m)
        return m * (l + 1) + 1 + l, [l]
    if task == "addition-2op":
        s = max(n, m) + 1
        return 3 + n + m + s, [s - 1]
    if task == "parity":
        return 2 * n + 2, [n]
    if task == "parity-noscratch":
        return n + 3, [1]
    if task == "multiplication":
        return n + m + 2 + m * (n + 2) + m * (n + m + 1), [max(n + 1, m), m - 1, n + m]
    return 2 * (n + m) + 3, [n + m]


def task_position_ids(w, mode, s=(1, 1, 1)):
    """The IDs a learned model of `mode` reads for a Written, at offsets s: one list per level."""
    levels = pos_levels(mode)
    s = list(s) + [1] * (3 - len(s))
    if mode == "absolute":
        if s[0] < 1:
            raise InputError("offset s1 must be >= 1 (got %d)" % s[0])
        return [[0] + [s[0] + k - 1 for k in range(1, len(w.tokens))]]
    if mode == "abacus":
        return [abacus_ids(w.tokens, s[0])]
    if mode in ("coupled", "coupled3", "coupled_rel") and levels != len(w.rel):
        raise InputError("pos_mode %s reads %d position levels, the task couples %d" % (mode, levels, len(w.rel)))
    out = []
    for lv in range(levels):
        if s[lv] < 1:
            raise InputError("offset s%d must be >= 1 (got %d)" % (lv + 1, s[lv]))
        out.append([0 if r < 0 else s[lv] + r for r in w.rel[lv]])
    return out


def task_sample_cell(task, rng, n, m=1):
    """One instance of test cell (n, m), with the C++ draws (addition: sample_TA)."""
    task = _check_task(task)
    if task in ("addition", "addition-noscratch"):
        return sample_TA(rng, n, m)
    if task.startswith("parity"):
        return ["".join(str(rng.uniform(0, 1)) for _ in range(n))]
    return [random_operand(rng, n), random_operand(rng, m)]


def task_sample_train(task, rng, n, m, count):
    """The training set of `count` instances, with the C++ draws: SA(n, m) for addition; lengths uniform
    in [1, n] x [1, m] for addition-2op and multiplication (SM(n, m)); bit strings of lengths 1..n."""
    task = _check_task(task)
    if task in ("addition", "addition-noscratch"):
        return sample_SA(rng, n, m, count)
    out = []
    for _ in range(count):
        if task.startswith("parity"):
            out.append(task_sample_cell(task, rng, rng.uniform(1, n)))
        else:
            la = rng.uniform(1, n)
            lb = rng.uniform(1, m)
            out.append([random_operand(rng, la), random_operand(rng, lb)])
    return out


def make_task_example(task, problem, mode, max_pos=None, s=(1, 1, 1)):
    """learn's make_example for any task: the problem (a string in the task's notation, or its operands)
    written, the IDs of `mode` at offsets s, targets from '=' on (EOS last). max_pos (one per level)
    checks the IDs fit the model's tables (InputError if not); None skips the check."""
    ops = task_parse(task, problem) if isinstance(problem, str) else list(problem)
    w = task_write(task, ops)
    s = tuple(s) + (1,) * (3 - len(s))
    if max_pos is not None:
        for lv in range(pos_levels(mode)):
            hi = (max_pos[0] - len(w.tokens) + 2 if mode == "absolute" else
                  max_pos[0] - _longest_digit_run(w.tokens) + 1 if mode == "abacus" else max_pos[lv] - w.span[lv])
            if not 1 <= s[lv] <= hi:
                raise InputError("%s %s with offsets %s needs position IDs beyond the model's max_pos %s"
                                 % (task, task_to_string(task, ops), s[:max(2, pos_levels(mode))], tuple(max_pos)))
    eq = w.eq
    targets = [-1] * eq + w.tokens[eq + 1:] + [EOS]
    ex = Example(w.tokens, task_position_ids(w, mode, s), targets, _Extent(len(w.tokens), eq), s[0], s[1])
    ex.answer_span = w.answer_span
    return ex


class _Extent:
    """A written instance's lengths under Shape's names (N, eq_index, response_len), for Example.shape."""

    __slots__ = ("N", "eq_index")

    def __init__(self, N, eq_index):
        self.N, self.eq_index = N, eq_index

    @property
    def response_len(self):
        return self.N - self.eq_index

    def __repr__(self):
        return "Extent(N=%d, eq_index=%d)" % (self.N, self.eq_index)
