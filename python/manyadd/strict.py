"""The model directories read as strictly as the C++ reads them, before torch builds anything.

load_learned and load_constructed call read_learned_dir / read_constructed_dir first: config.json is
read as core's read_json_file reads it (a regular file of at most 64 MiB, UTF-8, no key twice in one
object, no NaN/Infinity, no number beyond a double), its model section is checked field by field as
learn/src/decoder/model_config.cpp's from_json and ModelConfig::validate check it (LEARNED_FIELDS: the one table of
those rules here), and the tensors it implies (names and shapes, as Layout::make lays them out; the
constructed model's as construct/src/export.cpp writes them) are compared with model.safetensors'
header before any module or tensor is built. A model section the C++ accepts comes back with the C++
defaults filled in. Every refusal is an InputError naming the file and the field or tensor.
"""
import json
import math
import os
import re
import struct

from . import format as fmt
from . import safetensors
from .files import InputError, _show, open_regular, read_regular

__all__ = ["LEARNED_FIELDS", "POS_MODES", "read_json", "read_toml", "check_document", "open_regular", "learned_model", "learned_shapes", "train_section",
           "read_learned_dir", "constructed_config", "constructed_shapes", "read_constructed_dir"]

MAX_JSON = 64 << 20  # core/src/files.cpp read_json_file


# ---- files ----------------------------------------------------------------------------------------

# The strict JSON hooks of the safetensors reader (a key twice, NaN and infinities refused).
_unique, _no_constant = safetensors._unique_keys, safetensors._reject_constant


def _finite_float(text):
    v = float(text)
    if not math.isfinite(v):
        raise ValueError("the number %s is beyond a double" % text)
    return v


def _bounded_int(text):
    v = int(text)
    if abs(v) > 1.7976931348623157e308:
        raise ValueError("the number %s is beyond a double" % text[:40])
    return v


def read_json(path, max_bytes=MAX_JSON, max_depth=None):
    """The JSON document in the regular file `path`, parsed as strictly as core's parse_json_unique; with
    max_depth, a document nested deeper (arrays and objects) is refused too."""
    path = os.fspath(path)
    raw = read_regular(path, max_bytes)
    if raw.startswith(b"\xef\xbb\xbf"):  # a byte-order mark, which nlohmann's parser skips
        raw = raw[3:]
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique, parse_constant=_no_constant,
                         parse_float=_finite_float, parse_int=_bounded_int)
    except RecursionError:  # the parser's own bound (Python's recursion limit, ~1000 levels)
        raise InputError("'%s' is not valid JSON: nested more than %s levels deep"
                         % (_show(path), max_depth or "a thousand")) from None
    except (UnicodeDecodeError, ValueError) as e:
        raise InputError("'%s' is not valid JSON: %s" % (_show(path), e)) from None
    if max_depth is not None:
        check_document(doc, path, max_depth)
    return doc


# The TOML spellings a scan counts before tomllib sees the text: strings and comments (skipped), the
# brackets that nest, the dots of a dotted key and what ends a key (tomllib keeps every prefix of a
# dotted key: a key of k parts costs k^2, so 100,000 parts would take tens of GB).
_TOML_TOKEN = re.compile("|".join((
    r'"""(?:[^\\]|\\.)*?""""{0,2}',  # a multi-line basic string (up to two quotes before its end)
    r"'''.*?''''{0,2}",  # a multi-line literal string
    r'"(?:[^"\\\n]|\\.)*"',  # a basic string
    r"'[^'\n]*'",  # a literal string
    r"#[^\n]*",  # a comment
    r"[\[\]{}.,=\n]")), re.S)  # what the scan counts


def read_toml(path, max_bytes, max_depth):
    """The TOML document in the regular file `path` (tomllib), refused with InputError when it is not
    UTF-8 TOML, when its tables and arrays nest (or a dotted key has parts) beyond max_depth, or when it
    holds a value JSON has not (a date or time, nan, inf): check_document."""
    path = os.fspath(path)
    raw = read_regular(path, max_bytes)
    try:
        import tomllib
    except ImportError:
        raise InputError("'%s': TOML needs Python 3.11 (tomllib); write it as JSON" % _show(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError("'%s' is not valid TOML: %s" % (_show(path), e)) from None
    depth = parts = 0
    for m in _TOML_TOKEN.finditer(text):
        t = m.group()
        if t in "[{":
            depth, parts = depth + 1, 0
            if depth > max_depth:
                raise InputError("'%s' is nested more than %d levels deep (line %d)"
                                 % (_show(path), max_depth, text.count("\n", 0, m.start()) + 1))
        elif t in "]}":
            depth, parts = max(0, depth - 1), 0
        elif t == ".":
            parts += 1
            if parts >= max_depth:
                raise InputError("'%s' has a dotted key of more than %d parts (line %d)"
                                 % (_show(path), max_depth, text.count("\n", 0, m.start()) + 1))
        elif t in "\n,=":
            parts = 0
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise InputError("'%s' is not valid TOML: nested more than %d levels deep" % (_show(path), max_depth)) from None
    except ValueError as e:  # tomllib.TOMLDecodeError
        raise InputError("'%s' is not valid TOML: %s" % (_show(path), e)) from None
    check_document(doc, path, max_depth)
    return doc


def _type_name(v):
    import datetime
    if isinstance(v, datetime.datetime):
        return "a TOML date-time"
    if isinstance(v, datetime.date):
        return "a TOML date"
    if isinstance(v, datetime.time):
        return "a TOML time"
    if isinstance(v, float):
        return "%r (not a JSON number)" % v
    return "a %s" % type(v).__name__


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def check_document(doc, path, max_depth):
    """InputError unless `doc` nests at most max_depth arrays and objects and holds JSON values only
    (objects with string keys, arrays, strings, finite numbers, booleans, null), naming the key of the
    first one that is not (a TOML date, time or date-time; nan or inf). Iterative: no recursion to
    exhaust, however deep the document."""
    stack = [(doc, "", 0)]
    while stack:
        v, where, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth >= max_depth:
                raise InputError("'%s' is nested more than %d levels deep (at %s)" % (_show(path), max_depth,
                                                                                     _show(where or "the top", 80)))
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, x in items:
                if not isinstance(k, (str, int)):
                    raise InputError("'%s': %s has a key that is not a string" % (_show(path), _show(where or "the top")))
                if isinstance(v, list):
                    at = "%s[%d]" % (where, k)
                else:
                    at = (where + "." if where else "") + (k if _BARE_KEY.fullmatch(k) else json.dumps(k))
                stack.append((x, at, depth + 1))
        elif not (v is None or isinstance(v, (str, bool, int)) or (isinstance(v, float) and math.isfinite(v))):
            raise InputError("'%s': %s is %s: only JSON values are read here (strings, numbers, booleans, arrays, "
                             "tables)" % (_show(path), _show(where or "the document", 80), _type_name(v)))


# ---- the learned model: config.json "model", as learn/src/decoder/model_config.cpp reads it -----------------------

# pos_mode -> (position-ID levels, position tables): pos_levels / pos_tables of learn/src/decoder/model_config.cpp.
POS_MODES = {"coupled": (2, 2), "digits": (1, 1), "absolute": (1, 1), "none": (0, 0), "coupled3": (3, 3),
             "abacus": (1, 1), "fire": (0, 0), "rope": (0, 0), "coupled_rel": (2, 0)}
POS_CODE_KINDS = ("learned", "frozen", "hypercube", "shuffled")
_INT_LIMIT = 1_000_000_000  # from_json's geti: |x| <= 1e9 before validate() looks at it
_F32_MAX = 3.4028234663852886e38
MAX_LEXICODE_WORDS, MAX_CODE_BITS = 4096, 24  # model_config.cpp kMaxLexicodeWords, kMaxCodeBits

# The one table of the model section's rules: field -> (kind, C++ default, accepted values, pos_mode it
# belongs to or None). Kinds: int (a JSON integer) with its range [lo, hi]; f32 (any JSON number, read
# into a float, then the open range (lo, hi) on that float); str with its values; bool; any (read by no
# one: descriptions). A field of one pos_mode is refused in config.json for any other, and its
# default is checked there all the same (as validate() does).
LEARNED_FIELDS = {
    "vocab": ("int", 14, (14, 15), None),  # 14 or 15 exactly
    "vocabulary": ("any", None, None, None),  # a string, the vocabulary of vocab: checked below
    "architecture": ("any", None, None, None),
    "n_layers": ("int", 1, (1, 64), None),
    "n_heads": ("int", 4, (1, 64), None),
    "d_model": ("int", 64, (1, 8192), None),
    "d_head": ("int", 16, (1, 1024), None),
    "d_ff": ("int", 256, (1, 65536), None),
    "max_pos1": ("int", 20, (2, 1_000_000), None),
    "max_pos2": ("int", 20, (2, 1_000_000), None),
    "max_pos3": ("int", 20, (2, 1_000_000), None),
    "pos_mode": ("str", "coupled", tuple(POS_MODES), None),
    "abacus_k": ("int", 100, None, "abacus"),  # [1, max_pos1 - 1]: checked with max_pos1 below
    "fire_width": ("int", 32, (1, 4096), "fire"),
    "fire_threshold": ("str", "max", ("max", "min"), "fire"),
    "rel_window": ("int", 2, (0, 64), "coupled_rel"),
    "rel_far": ("bool", False, None, "coupled_rel"),
    "rel_far_norm": ("bool", False, None, "coupled_rel"),
    "rel_far_mask": ("bool", False, None, "coupled_rel"),
    "rel_value": ("bool", False, None, "coupled_rel"),
    "input_injection": ("bool", False, None, None),
    "pos_codes": ("str", "learned", None, None),  # one kind, or one per table, comma-separated: below
    "pos_code_scale": ("f32", 1.0, (0.0, 100.0), None),
    "pos_code_distance": ("int", 1, (1, 8), None),
    "norm_eps": ("f32", 1e-6, (0.0, 1.0), None),
    "init_std": ("f32", 0.02, (0.0, 10.0), None),
    "attn_scale": ("str", "inv_sqrt_dhead", ("inv_sqrt_dhead", "none", "positional"), None),
    "init": ("str", "normal", ("normal", "t5"), None),
    "tie_readout": ("bool", False, None, None),
    "final_norm": ("str", "rms", ("rms", "layer"), None),
}


def _f32(v):
    """v rounded to a float32, as the C++ reads the field into a float (beyond the range: infinity)."""
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def _field(model, name, what):
    """The value of one field of the model section (the default when absent), its type checked."""
    kind, default, allowed, _ = LEARNED_FIELDS[name]
    if name not in model:
        return default
    v = model[name]
    where = "%s: model.%s" % (what, name)
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError("%s must be an integer (got %s)" % (where, json.dumps(v)[:40]))
        if not -_INT_LIMIT <= v <= _INT_LIMIT:
            raise InputError("%s out of range (got %d)" % (where, v))
    elif kind == "f32":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InputError("%s must be a number (got %s)" % (where, json.dumps(v)[:40]))
        v = _f32(float(v))
    elif kind == "str":
        if not isinstance(v, str):
            raise InputError("%s must be a string (got %s)" % (where, json.dumps(v)[:40]))
        if allowed is not None and v not in allowed:
            raise InputError("%s '%s' unknown (%s)" % (where, v[:40], "|".join(allowed)))
    elif kind == "bool":
        if not isinstance(v, bool):
            raise InputError("%s must be true or false (got %s)" % (where, json.dumps(v)[:40]))
    return v


def _lexicode_basis(d, bits):
    """The leading words of the binary lexicode of minimum distance d and length `bits`: the code is
    their span (lexicodes are linear, Conway and Sloane 1986), and the greedy search of model_config.cpp's
    lexicode() keeps exactly the span's words, in increasing order. Each next basis word is the smallest
    word at distance >= d from the span so far: the smallest one outside the union of the balls of
    radius d - 1 around the code, which is a translate of one ball by every codeword (a boolean table
    over the 2^bits words, indexed as (high half, low half))."""
    import numpy as np
    lo_bits = bits // 2
    hi_n, lo_n = 1 << (bits - lo_bits), 1 << lo_bits
    pop = np.array([bin(i).count("1") for i in range(max(hi_n, lo_n))], dtype=np.uint8)
    covered = (pop[:hi_n, None] + pop[None, :lo_n]) < d  # the ball around word 0
    hi_idx, lo_idx = np.arange(hi_n), np.arange(lo_n)
    basis = []
    while not covered.all():
        g = int(np.argmin(covered.reshape(-1)))  # the smallest word the code does not cover
        basis.append(g)
        covered |= covered[np.ix_(hi_idx ^ (g >> lo_bits), lo_idx ^ (g & (lo_n - 1)))]
    return basis


def _code_bits(max_pos, d):
    """model_config.cpp pos_code_bits: the smallest P <= 24 whose lexicode of distance d holds max_pos + 1
    words (the words below 2^P are the span of the basis words below 2^P); 0 when none does. The basis
    below 2^12 is found first (a table of 4096 words), the one below 2^24 only when that is short."""
    count = max_pos + 1
    if d == 1:
        p = max(1, (count - 1).bit_length())
        return p if p <= MAX_CODE_BITS else 0
    for bits in (12, MAX_CODE_BITS):
        basis = _lexicode_basis(d, bits)
        for p in range(1, bits + 1):
            if (1 << p) >= count and (1 << sum(1 for g in basis if g < (1 << p))) >= count:
                return p
    return 0


def learned_model(model, what="config.json"):
    """The model section of a `train` config.json checked as the C++ checks it; returns it with every
    field the C++ would use (the defaults filled in; a pos_mode's own fields only for that mode)."""
    if not isinstance(model, dict):
        raise InputError("%s: the model section must be a JSON object" % what)
    for k in model:
        if k not in LEARNED_FIELDS:
            raise InputError("%s: model config: unknown field '%s'" % (what, k[:60]))
    mode = _field(model, "pos_mode", what)
    for k, (_, _, _, only) in LEARNED_FIELDS.items():
        if only is not None and k in model and mode != only:
            raise InputError("%s: model.%s applies to pos_mode %s only (pos_mode is %s)" % (what, k, only, mode))
    v = {k: _field(model, k, what) for k in LEARNED_FIELDS}

    def need(ok, msg):
        if not ok:
            raise InputError("%s: %s" % (what, msg))

    for k, (kind, _, rng, _) in LEARNED_FIELDS.items():
        if kind == "int" and rng is not None:
            lo, hi = rng
            need(lo <= v[k] <= hi, "model.%s must be in [%d, %d] (got %d)" % (k, lo, hi, v[k]))
        elif kind == "f32":
            lo, hi = rng
            need(lo < v[k] < hi, "model.%s must be in (%g, %g) (got %r as a float32)" % (k, lo, hi, v[k]))
    if "vocabulary" in model:  # describes vocab (model_config.cpp's to_json writes it); from_json refuses another
        need(isinstance(model["vocabulary"], str), "model.vocabulary must be a string")
        need(model["vocabulary"] == fmt.vocabulary(v["vocab"]), "model.vocabulary '%s' is not the vocabulary of "
             "model.vocab = %d ('%s')" % (model["vocabulary"][:40], v["vocab"], fmt.vocabulary(v["vocab"])))
    need(mode != "abacus" or 1 <= v["abacus_k"] < v["max_pos1"],
         "model.abacus_k must be in [1, max_pos1 - 1 = %d] (got %d)" % (v["max_pos1"] - 1, v["abacus_k"]))
    levels, tables = POS_MODES[mode]
    parts = v["pos_codes"].split(",")
    need(len(parts) == 1 or len(parts) == tables,
         "model.pos_codes '%s': %d kinds for pos_mode %s with %d table(s) (give one kind or one per level)"
         % (v["pos_codes"][:60], len(parts), mode, tables))
    for p in parts[:max(1, tables)]:
        need(p in POS_CODE_KINDS, "model.pos_codes: position code '%s' unknown (%s)" % (p[:40], "|".join(POS_CODE_KINDS)))
    codes = [parts[0] if len(parts) == 1 else parts[lv] for lv in range(tables)]
    need(tables > 0 or parts[0] == "learned",
         "model.pos_codes '%s': pos_mode %s has no position table" % (v["pos_codes"][:60], mode))
    code_dims = 0
    for lv, kind in enumerate(codes):
        if kind not in ("hypercube", "shuffled"):
            continue
        mp = v["max_pos%d" % (lv + 1)]
        need(v["pos_code_distance"] == 1 or mp < MAX_LEXICODE_WORDS,
             "model.pos_code_distance %d codes at most %d IDs (max_pos%d is %d)"
             % (v["pos_code_distance"], MAX_LEXICODE_WORDS - 1, lv + 1, mp))
        p = _code_bits(mp, v["pos_code_distance"])
        need(p > 0, "model.pos_codes: no code of at most %d bits and distance %d holds the %d IDs of level %d"
             % (MAX_CODE_BITS, v["pos_code_distance"], mp + 1, lv + 1))
        code_dims += 2 * p
    need(code_dims <= v["d_model"], "model.pos_codes: the hypercube codes take %d residual dimensions, more than "
         "d_model = %d" % (code_dims, v["d_model"]))
    need(mode != "rope" or v["d_head"] % 2 == 0,
         "pos_mode rope rotates pairs of dimensions: model.d_head must be even (got %d)" % v["d_head"])
    need(not v["rel_far_norm"] or v["rel_far"], "model.rel_far_norm needs model.rel_far (it divides the far gain "
         "among the far keys)")
    need(not (v["rel_far_mask"] and v["rel_far"]), "model.rel_far_mask and model.rel_far exclude each other (a "
         "masked far key has no gain)")
    out = {}
    for k, (kind, _, _, only) in LEARNED_FIELDS.items():
        if kind == "any" and k not in model:
            continue
        if only is not None and only != mode:
            continue
        if k in ("pos_codes", "pos_code_scale", "pos_code_distance") and k not in model:
            continue
        out[k] = v[k]
    return out


def learned_shapes(model):
    """{tensor name: shape} of a checked model section, in the order of learn's Layout::make."""
    C, V, H, L = model["d_model"], model["vocab"], model["n_heads"], model["n_layers"]
    D, F = H * model["d_head"], model["d_ff"]
    mode = model["pos_mode"]
    levels, tables = POS_MODES[mode]
    s = {"tok_emb.weight": (V, C)}
    for lv in range(tables):
        s["pos_emb.%d.weight" % lv] = (model["max_pos%d" % (lv + 1)] + 1, C)
    if mode == "fire":
        W = model["fire_width"]
        s.update({"fire.mlp.0.weight": (W, 1), "fire.mlp.2.weight": (W, W), "fire.mlp.4.weight": (H, W),
                  "fire.c": (1,), "fire.L_sqrt": (1,)})
    if mode == "coupled_rel":
        s["rel_bias.weight"] = (L, H, levels, 2 * model["rel_window"] + 1 + int(model["rel_far"]))
        if model["rel_value"]:
            s["rel_value.weight"] = (L, H, levels, 2 * model["rel_window"] + 1 + int(model["rel_far"]), model["d_head"])
    for b in range(L):
        p = "layers.%d." % b
        s.update({p + "attn_norm1.weight": (C,), p + "attn.q.weight": (D, C), p + "attn.k.weight": (D, C),
                  p + "attn.v.weight": (D, C), p + "attn.o.weight": (C, D), p + "attn_norm2.weight": (C,),
                  p + "ffn_norm1.weight": (C,), p + "ffn.wi.weight": (2 * F, C), p + "ffn.wo.weight": (C, F),
                  p + "ffn_norm2.weight": (C,)})
    s["final_norm.weight"] = (C,)
    if model["final_norm"] == "layer":
        s["final_norm.bias"] = (C,)
    if not model["tie_readout"]:
        s["lm_head.weight"] = (V, C)
    return s


def train_section(train, what):
    """The fields of config.json "train" the Python side reads, checked as evaluate reads them (absent or
    not an object: None, as evaluate ignores it; train.precision, which evaluate does not read, is
    checked too: LearnedConfig records it)."""
    if not isinstance(train, dict):
        return None
    out = dict(train)
    if "task" in train:
        if not isinstance(train["task"], str):
            raise InputError("%s: train.task must be a string (%s)" % (what, "|".join(fmt.TASKS)))
        fmt.task_levels(train["task"])
    if "precision" in train and train["precision"] not in ("fp32", "bf16"):
        raise InputError("%s: train.precision %s unknown (fp32|bf16)" % (what, json.dumps(train["precision"])[:40]))
    for k in ("train_n", "train_m"):  # evaluate reads them only when they are integers
        if k in train and (isinstance(train[k], bool) or not isinstance(train[k], int)):
            del out[k]
    return out


def check_tensor_set(path, entries, want, prefixes=("",)):
    """learn's check_tensor_set: the file's tensors {name: (dtype, shape)} are exactly `want` ({name:
    shape}) under each prefix, each of a floating-point dtype."""
    full = {p + k: s for p in prefixes for k, s in want.items()}
    for name, (dtype, shape) in entries.items():
        if name not in full:
            raise InputError("'%s': tensor '%s' is not part of the model its configuration describes (a "
                             "configuration and weights that disagree, e.g. fewer layers or another pos_mode)"
                             % (path, name[:80]))
        if tuple(shape) != tuple(full[name]):
            raise InputError("'%s': tensor '%s' has shape %s, the configuration implies %s"
                             % (path, name, list(shape), list(full[name])))
        if dtype not in safetensors.FLOAT_DTYPES:
            raise InputError("'%s': tensor '%s' is %s, weights are floating point" % (path, name, dtype))
    for name, shape in full.items():
        if name not in entries:
            raise InputError("'%s': tensor '%s' (shape %s) is missing: the configuration implies it"
                             % (path, name, list(shape)))


def _read_tensors(path, want, prefixes=("",)):
    """The arrays of a safetensors file after its header (names, dtypes, shapes) matched `want`."""
    with open_regular(path) as f:
        head = f.read(8)
        entries = None
        if len(head) == 8:
            (hl,) = struct.unpack("<Q", head)
            if hl <= safetensors.MAX_HEADER:
                entries = _header_entries(f.read(hl), path)
    if entries is not None:  # a malformed header: the full reader below names the problem
        check_tensor_set(path, entries, want, prefixes)
    tensors, meta = safetensors.read(path, use_numpy=True)
    # the same check on what was read (the header above was parsed leniently; the reader strictly)
    check_tensor_set(path, {k: ("F32" if v.dtype.kind == "f" else "U8", v.shape) for k, v in tensors.items()},
                     want, prefixes)
    return tensors, meta


def _header_entries(raw, path):
    """{name: (dtype, shape)} of a safetensors header whose entries are well formed, else None (the full
    reader then refuses the file with its own message)."""
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not (isinstance(e, dict) and isinstance(e.get("dtype"), str) and isinstance(e.get("shape"), list)
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in e["shape"])):
            return None
        out[name] = (e["dtype"], tuple(e["shape"]))
    return out


def read_learned_dir(model_dir, checkpoint=False):
    """(config, tensors, metadata) of a `train` output directory: config.json whole, its model section
    replaced by the checked one (defaults filled in), its train section checked; the weights of
    model.safetensors (or checkpoint.safetensors with its Adam moments adam.m.*, adam.v.*) as numpy
    arrays, after their names and shapes matched the configuration."""
    cpath = os.path.join(model_dir, "config.json")
    cfg = read_json(cpath)
    if not isinstance(cfg, dict) or "model" not in cfg:
        raise InputError("'%s' has no \"model\" section (is this a `train` output directory?)" % cpath)
    cfg = dict(cfg)
    cfg["model"] = learned_model(cfg["model"], cpath)
    cfg["train"] = train_section(cfg.get("train"), cpath)
    want = learned_shapes(cfg["model"])
    wpath = os.path.join(model_dir, "checkpoint.safetensors" if checkpoint else "model.safetensors")
    tensors, meta = _read_tensors(wpath, want, ("", "adam.m.", "adam.v.") if checkpoint else ("",))
    return cfg, tensors, meta


# ---- the constructed model: what verify_construction --export writes (construct/src/export.cpp) -----

CONSTRUCTED_FORMAT, CONSTRUCTED_VERSIONS = "manyadd-constructed", (1,)
VOCAB = list("0123456789+=>$")
HEADS = 4  # Theorem 4.1's heads, every one exported
MAX_P = 30  # hypercube bits of a position level (2^30 IDs: far beyond any table the exporter writes)


def _int_at(cfg, key, what, lo=1, hi=1 << 31):
    v = cfg.get(key) if isinstance(cfg, dict) else None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InputError("%s: %s must be an integer in [%d, %d] (got %s)" % (what, key, lo, hi, json.dumps(v)[:40]))
    return v


def constructed_config(cfg, what="config.json"):
    """config.json of an exported constructed model checked field by field against what the exporter
    writes: format, version, dimensions d = 19 + 2 P1 + 2 P2 = the residual names, four heads (index,
    name, d_qk, d_v = 1, the tensor names, a finite lambda), the FFN's hidden units, the position tables'
    sizes, the padding rule and the shape."""
    if not isinstance(cfg, dict):
        raise InputError("%s: not a JSON object" % what)
    if cfg.get("format") != CONSTRUCTED_FORMAT:
        raise InputError("%s: not a constructed model (format %s; `verify_construction --export` writes %r)"
                         % (what, json.dumps(cfg.get("format"))[:40], CONSTRUCTED_FORMAT))
    ver = cfg.get("format_version")
    if isinstance(ver, bool) or ver not in CONSTRUCTED_VERSIONS:
        raise InputError("%s: format_version %s unknown to this version of manyadd (knows %s)"
                         % (what, json.dumps(ver)[:40], list(CONSTRUCTED_VERSIONS)))
    P1, P2 = _int_at(cfg, "P1", what, 1, MAX_P), _int_at(cfg, "P2", what, 1, MAX_P)
    d = _int_at(cfg, "d", what, 1, 19 + 4 * MAX_P)
    if d != 19 + 2 * P1 + 2 * P2:
        raise InputError("%s: d = %d is not 19 + 2 P1 + 2 P2 = %d" % (what, d, 19 + 2 * P1 + 2 * P2))
    dims = cfg.get("residual_dims")
    if not (isinstance(dims, list) and len(dims) == d and all(isinstance(n, str) for n in dims)
            and len(set(dims)) == d):
        raise InputError("%s: residual_dims must be %d distinct names (one per residual dimension)" % (what, d))
    arch = cfg.get("architecture")
    aw = what + ": architecture"
    for key, want in (("layers", 1), ("heads", HEADS), ("d_model", d), ("vocab_size", len(VOCAB))):
        _int_at(arch, key, aw, want, want)
    F = _int_at(arch, "d_ffn", aw, 1, 1 << 20)
    units = cfg.get("hidden_units")
    if not (isinstance(units, list) and len(units) == F and all(isinstance(n, str) for n in units)):
        raise InputError("%s: hidden_units must be %d names (architecture.d_ffn)" % (what, F))
    heads = cfg.get("heads")
    if not (isinstance(heads, list) and len(heads) == HEADS):
        raise InputError("%s: heads must list the %d heads of the construction (got %s)"
                         % (what, HEADS, len(heads) if isinstance(heads, list) else json.dumps(heads)[:40]))
    for h, head in enumerate(heads):
        hw = "%s: heads[%d]" % (what, h)
        _int_at(head, "index", hw, h + 1, h + 1)
        _int_at(head, "d_qk", hw, 1, d)
        _int_at(head, "d_v", hw, 1, 1)
        if not isinstance(head.get("name"), str):
            raise InputError("%s: name must be a string" % hw)
        lam = head.get("lambda")
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam):
            raise InputError("%s: lambda must be a number" % hw)
        names = ["heads.%d.%s" % (h + 1, t) for t in "QKVU"]
        if head.get("tensors", names) != names:
            raise InputError("%s: tensors must be %s" % (hw, names))
    lams = cfg.get("lambdas")
    if lams is not None and lams != [head["lambda"] for head in heads]:
        raise InputError("%s: lambdas %s are not the heads' lambdas" % (what, json.dumps(lams)[:80]))
    pos = cfg.get("position_ids")
    pw = what + ": position_ids"
    _int_at(pos, "levels", pw, 2, 2)
    mp1, mp2 = _int_at(pos, "max_pos1", pw), _int_at(pos, "max_pos2", pw)
    padding = cfg.get("padding")
    if padding is not None and not isinstance(padding, dict):
        raise InputError("%s: padding must be an object or null" % what)
    rule = (padding or {}).get("rule")
    if rule not in (None, "theorem", "minimal"):
        raise InputError("%s: padding.rule %s unknown (theorem|minimal|null)" % (what, json.dumps(rule)[:40]))
    shape = cfg.get("shape")
    if shape is not None:
        sw = what + ": shape"
        n, m = _int_at(shape, "n", sw, 1, fmt.MAX_DIGITS), _int_at(shape, "m", sw, 1, fmt.MAX_OPERANDS)
        s = fmt.Shape.make(n, m, rule or "theorem")
        _int_at(shape, "l", sw, s.l, s.l)
        _int_at(shape, "N", sw, s.N, s.N)
        if mp1 < s.l + 1 or mp2 < s.m + 1:
            raise InputError("%s: position_ids max_pos1 = %d, max_pos2 = %d leave no offset for l = %d, m = %d"
                             % (what, mp1, mp2, s.l, s.m))
    voc = cfg.get("vocab", VOCAB)
    if voc != VOCAB:
        raise InputError("%s: vocab must be %s" % (what, "".join(VOCAB)))
    return cfg


def constructed_shapes(cfg):
    """{tensor name: shape} a checked constructed config.json implies (export_model's tensors)."""
    d, F, V = cfg["d"], cfg["architecture"]["d_ffn"], len(VOCAB)
    s = {}
    for h, head in enumerate(cfg["heads"]):
        q = head["d_qk"]
        s.update({"heads.%d.Q" % (h + 1): (q, d), "heads.%d.K" % (h + 1): (q, d), "heads.%d.V" % (h + 1): (1, d),
                  "heads.%d.U" % (h + 1): (d, 1)})
    s.update({"ffn.W1": (F, d), "ffn.b1": (F,), "ffn.W2": (d, F), "ffn.b2": (d,), "readout.Wout": (V, d),
              "embed.token": (V, d), "embed.pos1": (cfg["position_ids"]["max_pos1"] + 1, d),
              "embed.pos2": (cfg["position_ids"]["max_pos2"] + 1, d)})
    return s


def read_constructed_dir(model_dir):
    """(config, tensors) of a `verify_construction --export` directory, every check above passed."""
    cpath = os.path.join(model_dir, "config.json")
    cfg = constructed_config(read_json(cpath), cpath)
    tensors, _ = _read_tensors(os.path.join(model_dir, "model.safetensors"), constructed_shapes(cfg))
    return cfg, tensors
