"""The learned transformer of learn/ as a torch module: load_learned(DIR) reads a `train` output directory
(config.json + model.safetensors) and reproduces learn/'s forward (learn/src/decoder/model.cpp,
learn/include/manyadd/learn/decoder/layers.hpp) for every position mode. This is the project's torch twin:
bench/torch_twin.py trains it against the C++ trainer, tests/test_python_models.py checks its logits
against `evaluate --problem ... --json` and its attention against `dump_attention`.

    from manyadd import load_learned
    model = load_learned("models/cpu-sa1010-1l4h-d64")          # fp32, eval mode, on the CPU
    ex = model.example("57+48+96")                              # tokens and IDs as learn/ builds them
    logits, cache = model.run_with_cache(ex.tokens, ex.pos)     # (1, N, 14), {hook name: activation}
    cache["blocks.0.attn.hook_pattern"]                         # (1, n_heads, N, N) post-softmax
    model.generate("57+48+96")                                  # '000>750>501>102$' (greedy)

The forward (shapes: B batch, T tokens, C d_model, H n_heads, D d_head, F d_ff, V = 14):
    x = tok_emb[tokens] + sum over levels lv of pos_emb.lv[pos[lv]]     (pos_mode: coupled 2 levels,
                                                                         digits/absolute/abacus 1,
                                                                         none/fire/rope/coupled_rel 0)
    per layer:  x = attn_norm2(x + attn(attn_norm1(x)))                 (the reference's "PreNorm and
                x = ffn_norm2(x + ffn(ffn_norm1(x)))                     PostNorm")
                input_injection: layer l >= 1 reads x + x0, x0 the embedding (McLeish et al. 2024)
    logits = lm_head(final_norm(x))                                     (tie_readout false)
    logits = (final_norm(x) * d_model^-1/2) tok_emb^T                  (tie_readout true: T5's readout,
                                                                         no lm_head tensor)
    attn: q, k, v = x Wq^T, x Wk^T, x Wv^T split in H heads of D; causal softmax(q k^T * scale) v;
          output projection o (no biases anywhere); scale = 1/sqrt(D) (attn_scale inv_sqrt_dhead) or 1
          (attn_scale none: T5, the authors' model) or 0 (positional: the coupled_rel bias alone)
          pos_mode rope: q, k rotated before the scores, the pair (2k, 2k+1) of token index p by the angle
          p 10000^(-2k/D) (Su et al. 2021; learn/include/manyadd/learn/decoder/layers.hpp)
          pos_mode fire: the scores plus FIRE's bias b (H, T, T), the same in every layer: b(i, j) =
          mlp(u), u = log1p(|c| (i - j)) / (log1p(|c| n_i) + 1e-6), n_i = max(i, L) or min(i, L)
          (fire_threshold), L = L_sqrt^2, mlp = Linear(1, W) ReLU Linear(W, W) ReLU Linear(W, H), no
          biases (Li et al. 2024, as the paper-000 authors' code; layers.hpp)
          pos_mode coupled_rel: the scores plus layer l's bias: sum over the 2 levels of rel_bias.weight[l, h, lv,
          d + W], d = key ID - query ID of the level, |d| <= W = rel_window, none where an ID is 0 (layers.hpp)
          rel_value: each key's value plus sum over the 2 levels of rel_value.weight[l, h, lv, bucket] (the
          bias's bucket of the level's ID difference): z_i = sum_j P_ij (v_j + sum_lv r[lv, b_lv(i, j)]) (Shaw et
          al. 2018's relative values; layers.hpp coupled_rel_value)
    ffn: GEGLU, [gate | up] = x wi^T (2F), gelu_tanh(gate) * up, then wo
    norm: RMSNorm w * x / sqrt(mean(x^2) + norm_eps); the final norm RMSNorm (final_norm rms) or LayerNorm
          w * (x - mean) / sqrt(var + norm_eps) + b, biased variance (final_norm layer)
Sequences of a batch may have different lengths: pad them at the end (attention is causal, so the real
rows never see the padding) and read the logits of the real rows only.

Hook points (TransformerLens names; shapes for a batch (B, T)):
    hook_embed (B, T, C)              token embedding
    hook_pos_embed (B, T, C)          sum of the position embeddings (absent without tables: none, fire, rope)
    blocks.{l}.hook_resid_pre         (B, T, C) block input
    blocks.{l}.ln1.hook_normalized    (B, T, C) attn_norm1 output
    hook_fire_bias (H, T, T)          pos_mode fire: the bias every layer adds to its scores
    blocks.{l}.hook_rel_bias (B, H, T, T)  pos_mode coupled_rel: layer l's bias from the IDs (rel_bias.weight)
    blocks.{l}.attn.hook_q/hook_k/hook_v   (B, T, H, D)
    blocks.{l}.attn.hook_rot_q/hook_rot_k  (B, T, H, D) pos_mode rope: q, k after the rotation
    blocks.{l}.attn.hook_attn_scores  (B, H, T, T) scaled scores (+ FIRE's bias), -inf above the diagonal
    blocks.{l}.attn.hook_pattern      (B, H, T, T) post-softmax attention (row = query, column = key)
    blocks.{l}.attn.hook_z            (B, T, H, D) per-head attention output, before the projection
    blocks.{l}.hook_attn_out          (B, T, C) output projection
    blocks.{l}.hook_resid_mid         (B, T, C) attn_norm2(resid_pre + attn_out)
    blocks.{l}.ln2.hook_normalized    (B, T, C) ffn_norm1 output
    blocks.{l}.mlp.hook_pre           (B, T, F) gate before gelu      blocks.{l}.mlp.hook_pre_linear (B, T, F) up
    blocks.{l}.mlp.hook_post          (B, T, F) gelu_tanh(gate) * up
    blocks.{l}.hook_mlp_out           (B, T, C) wo output
    blocks.{l}.hook_resid_post        (B, T, C) ffn_norm2(resid_mid + mlp_out): the block output
    ln_final.hook_normalized          (B, T, C) final_norm output (before the tied readout's scale)
    hook_logits                       (B, T, V)
The parameters keep model.safetensors' names (tok_emb.weight, pos_emb.0.weight, layers.0.attn.q.weight,
...), so model.state_dict() and the file hold the same tensors.

config.json: every field of its "model" section is read and checked (see ARCHITECTURE_SWITCHES); a
field this module does not know, or a value of a known switch it does not implement, is an InputError:
a model written by a newer `train` is refused rather than run with a different forward.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from . import format as fmt
from . import strict
from .files import InputError
from .hooks import HookedModule, HookPoint

__all__ = ["LearnedConfig", "LearnedTransformer", "load_learned", "ARCHITECTURE_SWITCHES"]

# Fields of config.json "model" and what each does to the forward. Their kinds, ranges, C++ defaults and
# pos_modes are strict.LEARNED_FIELDS's (the one table of the C++ limits, learn/src/decoder/model_config.cpp); here what
# this module does with them.
#   sizes: integers that shape the tensors.
_SIZES = {k: strict.LEARNED_FIELDS[k][2] for k in ("vocab", "n_layers", "n_heads", "d_model", "d_head", "d_ff",
                                                   "max_pos1", "max_pos2", "max_pos3", "fire_width")}
# Sizes a config.json written before they existed lacks (or, fire_width, one of another pos_mode): the C++ default.
_SIZE_DEFAULTS = {k: strict.LEARNED_FIELDS[k][1] for k in ("max_pos3", "fire_width")}
# Fields config.json has for pos_mode fire only (the C++ refuses them elsewhere).
_FIRE_ONLY = tuple(k for k, f in strict.LEARNED_FIELDS.items() if f[3] == "fire")
# pos_mode coupled_rel's one size: the largest |ID difference| with a gain of its own (range, default).
_REL_WINDOW = tuple(strict.LEARNED_FIELDS["rel_window"][2]) + (strict.LEARNED_FIELDS["rel_window"][1],)
# Switches of the architecture: field -> {value this module implements: meaning}. A switch absent from
# config.json takes its first value (what every `train` so far has done). A value not listed here is
# refused: implementing one is adding its entry and its branch in the module below (and a test against
# the C++ that writes it).
ARCHITECTURE_SWITCHES = {
    "pos_mode": {"coupled": "two position tables (significance, operand)", "digits": "level 1 only",
                 "absolute": "one ID per index", "none": "no position table (NoPE)",
                 "coupled3": "three position tables (multiplication's tri-level coupling)",
                 "abacus": "one table read at Abacus IDs (each number's digits from its first token)",
                 "fire": "FIRE's learned relative-position bias on the scores (fire.* tensors)",
                 "rope": "RoPE: q and k rotated by the token index",
                 "coupled_rel": "the coupled IDs of both levels as a relative score bias (rel_bias.weight), no table"},
    "fire_threshold": {"max": "FIRE's normalizer psi(max(i, L)) (the FIRE paper)",
                       "min": "psi(min(i, L)) (the paper-000 authors' code)"},
    "input_injection": {False: "each layer reads its predecessor's output",
                        True: "layers after the first read their predecessor's output + the embedding"},
    "attn_scale": {"inv_sqrt_dhead": "scores q.k / sqrt(d_head)", "none": "scores q.k unscaled (T5)",
                   "positional": "scores the coupled_rel bias alone (q.k times 0)"},
    "final_norm": {"rms": "RMSNorm with weight, eps norm_eps",
                   "layer": "LayerNorm with weight and bias, eps norm_eps (biased variance)"},
    "tie_readout": {False: "lm_head.weight is its own tensor",
                    True: "logits = (final_norm(x) d_model^-1/2) tok_emb.weight^T, no lm_head tensor"},
}
# Fields that do not change the forward: the initialization, the descriptions. pos_codes and
# pos_code_scale say how the position tables were made and whether training moved them; the tables
# themselves are in model.safetensors (checked below: one kind per level, as the C++ parses them).
_INERT = {"init_std", "init", "vocabulary", "architecture", "abacus_k", "pos_codes", "pos_code_scale",
          "pos_code_distance"}
POS_CODES = ("learned", "frozen", "hypercube", "shuffled")
# train.precision: the arithmetic of training (the saved weights are fp32 masters either way); this module
# runs the dtype load_learned is given, so a bf16-trained model runs here in fp32 unless asked otherwise.
_PRECISIONS = ("fp32", "bf16")


class LearnedConfig:
    """The checked "model" section of config.json (attributes of the same names) and the training region."""

    def __init__(self, model, train=None):
        if not isinstance(model, dict):
            raise InputError("config.json: 'model' must be an object")
        for k in model:
            if (k not in _SIZES and k not in ARCHITECTURE_SWITCHES and k not in _INERT and k != "norm_eps"
                    and k not in ("rel_window", "rel_far", "rel_far_norm", "rel_far_mask", "rel_value")):
                raise InputError("config.json: model.%s is unknown to this version of manyadd (python/manyadd/learned.py):"
                                 " refusing to guess how it changes the forward" % k)
        for k, (lo, hi) in _SIZES.items():
            if k not in model and k not in _SIZE_DEFAULTS:
                raise InputError("config.json: model.%s is missing" % k)
            v = model.get(k, _SIZE_DEFAULTS.get(k))
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise InputError("config.json: model.%s must be an integer in [%d, %d] (got %r)" % (k, lo, hi, v))
            setattr(self, k, v)
        for k, allowed in ARCHITECTURE_SWITCHES.items():
            v = model.get(k, next(iter(allowed)))
            if k == "pos_mode" and k not in model:
                raise InputError("config.json: model.pos_mode is missing")
            if not any(v == a and type(v) is type(a) for a in allowed):
                raise InputError("config.json: model.%s = %r is not implemented by this version of manyadd "
                                 "(python/manyadd/learned.py knows %s)" % (k, v, ", ".join(repr(a) for a in allowed)))
            setattr(self, k, v)
        for k in _FIRE_ONLY:
            if k in model and self.pos_mode != "fire":
                raise InputError("config.json: model.%s applies to pos_mode fire only (pos_mode is %r)" % (k, self.pos_mode))
        for k in ("rel_window", "rel_far", "rel_far_norm", "rel_far_mask", "rel_value"):
            if k in model and self.pos_mode != "coupled_rel":
                raise InputError("config.json: model.%s applies to pos_mode coupled_rel only (pos_mode is %r)"
                                 % (k, self.pos_mode))
        self.rel_far = model.get("rel_far", False)
        if not isinstance(self.rel_far, bool):
            raise InputError("config.json: model.rel_far must be true or false (got %r)" % (self.rel_far,))
        self.rel_far_norm = model.get("rel_far_norm", False)
        if not isinstance(self.rel_far_norm, bool):
            raise InputError("config.json: model.rel_far_norm must be true or false (got %r)" % (self.rel_far_norm,))
        if self.rel_far_norm and not self.rel_far:
            raise InputError("config.json: model.rel_far_norm needs model.rel_far")
        self.rel_far_mask = model.get("rel_far_mask", False)
        if not isinstance(self.rel_far_mask, bool):
            raise InputError("config.json: model.rel_far_mask must be true or false (got %r)" % (self.rel_far_mask,))
        if self.rel_far_mask and self.rel_far:
            raise InputError("config.json: model.rel_far_mask and model.rel_far exclude each other")
        self.rel_value = model.get("rel_value", False)
        if not isinstance(self.rel_value, bool):
            raise InputError("config.json: model.rel_value must be true or false (got %r)" % (self.rel_value,))
        lo, hi, dflt = _REL_WINDOW
        self.rel_window = model.get("rel_window", dflt)
        if isinstance(self.rel_window, bool) or not isinstance(self.rel_window, int) or not lo <= self.rel_window <= hi:
            raise InputError("config.json: model.rel_window must be an integer in [%d, %d] (got %r)"
                             % (lo, hi, self.rel_window))
        codes = model.get("pos_codes", "learned")
        parts = codes.split(",") if isinstance(codes, str) else None
        levels = fmt.pos_tables(self.pos_mode)
        if (parts is None or any(k not in POS_CODES for k in parts) or (len(parts) > 1 and len(parts) != levels)
                or (levels == 0 and parts != ["learned"])):
            raise InputError("config.json: model.pos_codes = %r is not one kind or one per level (%d) of %s"
                             % (codes, levels, "|".join(POS_CODES)))
        self.pos_codes = tuple(parts * levels if len(parts) == 1 else parts)
        scale = model.get("pos_code_scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < 100:
            raise InputError("config.json: model.pos_code_scale must be a number in (0, 100) (got %r)" % (scale,))
        dist = model.get("pos_code_distance", 1)
        if isinstance(dist, bool) or not isinstance(dist, int) or not 1 <= dist <= 8:
            raise InputError("config.json: model.pos_code_distance must be an integer in [1, 8] (got %r)" % (dist,))
        if self.pos_mode == "rope" and self.d_head % 2:
            raise InputError("config.json: pos_mode rope needs an even d_head (got %d)" % self.d_head)
        eps = model.get("norm_eps")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
            raise InputError("config.json: model.norm_eps must be a number in (0, 1) (got %r)" % (eps,))
        # The C++ reads norm_eps into a float: use that float's value.
        self.norm_eps = float(torch.tensor(eps, dtype=torch.float32))
        voc = model.get("vocabulary", fmt.vocabulary(self.vocab))
        if voc != fmt.vocabulary(self.vocab):
            raise InputError("config.json: model.vocabulary %r is not %r" % (voc, fmt.vocabulary(self.vocab)))
        self.levels = fmt.pos_levels(self.pos_mode)  # levels of IDs the forward reads
        self.tables = fmt.pos_tables(self.pos_mode)  # position tables (coupled_rel: none)
        self.max_pos = (self.max_pos1, self.max_pos2, self.max_pos3)
        train = train if isinstance(train, dict) else {}
        self.task = train.get("task", "addition")  # config.json without one: addition
        fmt.task_levels(self.task)
        self.train_n, self.train_m = train.get("train_n"), train.get("train_m")
        self.precision = train.get("precision", "fp32")
        if self.precision not in _PRECISIONS:
            raise InputError("config.json: train.precision = %r unknown (%s)" % (self.precision, "|".join(_PRECISIONS)))

    @classmethod
    def read(cls, path):
        """The checked configuration of a config.json (manyadd.strict: the C++ reader's rules)."""
        cfg = strict.read_json(path)
        if not isinstance(cfg, dict) or "model" not in cfg:
            raise InputError("%s: no 'model' section (is this a `train` output directory?)" % path)
        return cls(strict.learned_model(cfg["model"], path), strict.train_section(cfg.get("train"), path))

    def __repr__(self):
        return ("LearnedConfig(n_layers=%d, n_heads=%d, d_model=%d, d_head=%d, d_ff=%d, pos_mode=%r, max_pos=%s)"
                % (self.n_layers, self.n_heads, self.d_model, self.d_head, self.d_ff, self.pos_mode, self.max_pos))


ROPE_BASE = 10000.0  # learn's kRopeBase (the authors' rotary_base)


def rope_tables(T, D, dtype, device):
    """cos, sin (T, D/2) of the angles p 10000^(-2k/D), p = 0..T-1: in float64, then dtype (as the C++)."""
    inv = torch.tensor([ROPE_BASE ** (-2.0 * float(k) / D) for k in range(D // 2)], dtype=torch.float64)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().to(dtype=dtype, device=device), ang.sin().to(dtype=dtype, device=device)


def rope_rotate(x, cos, sin):
    """x (B, T, H, D): the pair (2k, 2k+1) of row t turned by the angle of (t, k) (learn's rope_rotate)."""
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)


class Fire(nn.Module):
    """FIRE's score bias (learn/include/manyadd/learn/decoder/layers.hpp, FIRE): parameters fire.mlp.0/2/4.weight,
    fire.c, fire.L_sqrt as in model.safetensors."""

    def __init__(self, cfg):
        super().__init__()
        W = cfg.fire_width
        self.mlp = nn.Sequential(nn.Linear(1, W, bias=False), nn.ReLU(), nn.Linear(W, W, bias=False), nn.ReLU(),
                                 nn.Linear(W, cfg.n_heads, bias=False))
        self.c = nn.Parameter(torch.full((1,), 0.1))
        self.L_sqrt = nn.Parameter(torch.full((1,), 16.0))
        self.max_threshold = cfg.fire_threshold == "max"

    def forward(self, T):
        """The bias (H, T, T) of token indices i (rows) and j (columns); 0 above the diagonal (masked)."""
        dt, dev = self.c.dtype, self.c.device
        i = torch.arange(T, dtype=dt, device=dev)
        d = (i[:, None] - i[None, :]).clamp_min(0)
        L = self.L_sqrt.square()
        n = torch.maximum(i, L) if self.max_threshold else torch.minimum(i, L)
        ac = self.c.abs()
        u = torch.log1p(ac * d) / (torch.log1p(ac * n)[:, None] + 1e-6)
        return self.mlp(u.unsqueeze(-1)).permute(2, 0, 1)


class CoupledRelBias(nn.Module):
    """pos_mode coupled_rel's score bias (learn/include/manyadd/learn/decoder/layers.hpp, coupled_rel_bias): the
    parameter rel_bias.weight g (n_layers, H, 2, 2W + 1 (+ 1 with rel_far)); layer l's bias of query i and
    key j is sum over levels lv of g[l, h, lv, d + W] with d = id_lv(j) - id_lv(i), |d| <= W, and for
    |d| > W g[l, h, lv, 2W + 1] with rel_far, nothing without; nothing where either ID is 0. The C++ adds
    level 1's gain to 0, then level 2's: the same float sum. rel_far_norm: the far gain less ln N (float32 of
    the double log), N the query's far keys j <= i on the level (coupled_rel_far_count), when N >= 2.
    rel_far_mask: -inf (not attended) where either level is far (both IDs > 0, |d| > W; coupled_rel_masked)."""

    def __init__(self, cfg):
        super().__init__()
        self.W, self.far, self.far_norm = cfg.rel_window, cfg.rel_far, getattr(cfg, "rel_far_norm", False)
        self.far_mask = getattr(cfg, "rel_far_mask", False)
        self.weight = nn.Parameter(torch.zeros(cfg.n_layers, cfg.n_heads, 2, 2 * self.W + 1 + int(self.far)))

    def forward(self, l, pos):
        bias, masked = None, None
        for lv in range(2):
            p = pos[lv]  # (B, T)
            d = p[:, None, :] - p[:, :, None]  # (B, Tq, Tk): key ID - query ID
            near = d.abs() <= self.W
            on = (near | self.far) & (p[:, :, None] > 0) & (p[:, None, :] > 0)
            g = self.weight[l, :, lv]  # (H, nb)
            idx = torch.where(near, d + self.W, torch.full_like(d, 2 * self.W + 1 if self.far else 0))  # 0: masked
            b = g[:, idx]  # (H, B, Tq, Tk)
            if self.far_norm:
                far = on & ~near & torch.ones_like(near).tril()  # the query's far keys j <= i
                n = far.sum(-1, dtype=torch.float64)  # (B, Tq)
                shift = torch.where(n > 1, n.clamp(min=1).log(), torch.zeros_like(n)).to(b.dtype)
                b = torch.where(far[None], b - shift[None, :, :, None], b)
            b = torch.where(on[None], b, torch.zeros((), dtype=b.dtype, device=b.device)).transpose(0, 1)
            bias = b if bias is None else bias + b
            if self.far_mask:
                m = ~near & (p[:, :, None] > 0) & (p[:, None, :] > 0)  # (B, Tq, Tk)
                masked = m if masked is None else masked | m
        if masked is not None:
            bias = bias.masked_fill(masked[:, None], float("-inf"))
        return bias


def coupled_rel_buckets(pos, W, far):
    """Per level: (bucket (B, Tq, Tk), on (B, Tq, Tk)) of every query/key pair, the bucket of layers.hpp's
    coupled_rel_bucket where on (d + W for |d| <= W, 2W + 1 for |d| > W with far), 0 where off."""
    out = []
    for lv in range(2):
        p = pos[lv]
        d = p[:, None, :] - p[:, :, None]
        near = d.abs() <= W
        on = (near | far) & (p[:, :, None] > 0) & (p[:, None, :] > 0)
        out.append((torch.where(on, torch.where(near, d + W, torch.full_like(d, 2 * W + 1)), torch.zeros_like(d)), on))
    return out


class CoupledRelValue(nn.Module):
    """model.rel_value (learn/include/manyadd/learn/decoder/layers.hpp, coupled_rel_value): the parameter
    rel_value.weight r (n_layers, H, 2, nb, D), nb the bias's buckets; head h's output at query i gains
    sum over levels lv and buckets b of M[lv, b] r[l, h, lv, b], M[lv, b] the attention weight of the
    query's keys in bucket b of level lv (the C++ sums the same masses, then adds them times r)."""

    def __init__(self, cfg):
        super().__init__()
        self.W, self.far = cfg.rel_window, cfg.rel_far
        self.nb = 2 * self.W + 1 + int(self.far)
        self.weight = nn.Parameter(torch.zeros(cfg.n_layers, cfg.n_heads, 2, self.nb, cfg.d_head))

    def term(self, l, buckets, pattern):
        """pattern (B, H, T, T) -> the term (B, H, T, D)."""
        out = None
        for lv, (idx, on) in enumerate(buckets):
            w = pattern * on[:, None].to(pattern.dtype)
            M = torch.zeros(pattern.shape[:3] + (self.nb,), dtype=pattern.dtype, device=pattern.device)
            M.scatter_add_(-1, idx[:, None].expand_as(pattern), w)
            t = torch.einsum("bhin,hnd->bhid", M, self.weight[l, :, lv])
            out = t if out is None else out + t
        return out


class RMSNorm(nn.Module):
    def __init__(self, C, eps, name):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps
        self.hook_normalized = HookPoint(name) if name else None

    def forward(self, x):
        y = self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.hook_normalized(y) if self.hook_normalized is not None else y


class LayerNorm(nn.Module):
    """learn's layernorm_forward: w (x - mean) rstd + b, rstd = 1 / sqrt(mean((x - mean)^2) + eps)."""

    def __init__(self, C, eps, name):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.bias = nn.Parameter(torch.zeros(C))
        self.eps = eps
        self.hook_normalized = HookPoint(name) if name else None

    def forward(self, x):
        xc = x - x.mean(-1, keepdim=True)
        y = self.weight * xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + self.eps) + self.bias
        return self.hook_normalized(y) if self.hook_normalized is not None else y


class Attention(nn.Module):
    def __init__(self, cfg, l):
        super().__init__()
        C, self.H, self.D = cfg.d_model, cfg.n_heads, cfg.d_head
        self.q, self.k, self.v = (nn.Linear(C, self.H * self.D, bias=False) for _ in range(3))
        self.o = nn.Linear(self.H * self.D, C, bias=False)
        self.scale = {"inv_sqrt_dhead": 1.0 / math.sqrt(self.D), "none": 1.0, "positional": 0.0}[cfg.attn_scale]
        self.rope = cfg.pos_mode == "rope"
        # torch's fused attention (torch >= 2.0) where nothing asks for the scores or the pattern: the same
        # mathematics, another summation order; off by default so that hooked and unhooked runs agree.
        self.fused = False
        p = "blocks.%d.attn." % l
        for n in ("q", "k", "v", "attn_scores", "pattern", "z") + (("rot_q", "rot_k") if self.rope else ()):
            setattr(self, "hook_" + n, HookPoint(p + "hook_" + n))

    def forward(self, x, bias=None, rel_value=None):
        """bias: FIRE's (H, T, T) or coupled_rel's (B, H, T, T) score bias, or None. rel_value: None or
        (CoupledRelValue, layer, the pairs' buckets): its term added to every head's output."""
        B, T, _ = x.shape
        q = self.hook_q(self.q(x).view(B, T, self.H, self.D))
        k = self.hook_k(self.k(x).view(B, T, self.H, self.D))
        if self.rope:
            cos, sin = rope_tables(T, self.D, x.dtype, x.device)
            q, k = self.hook_rot_q(rope_rotate(q, cos, sin)), self.hook_rot_k(rope_rotate(k, cos, sin))
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, T, D)
        v = self.hook_v(self.v(x).view(B, T, self.H, self.D)).transpose(1, 2)
        if self.fused and bias is None and rel_value is None and hasattr(F, "scaled_dot_product_attention") \
                and not (self.hook_attn_scores.has_hooks() or self.hook_pattern.has_hooks()):
            if self.scale == 1.0 / math.sqrt(self.D):
                z = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(D) by default
            else:  # torch >= 2.1 takes the scale; 2.0 gets q scaled to the same scores
                try:
                    z = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
                except TypeError:
                    z = F.scaled_dot_product_attention(q * (self.scale * math.sqrt(self.D)), k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * self.scale
            if bias is not None:
                s = s + bias
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            s = self.hook_attn_scores(s.masked_fill(mask, float("-inf")))
            pattern = self.hook_pattern(torch.softmax(s, dim=-1))
            z = pattern @ v
            if rel_value is not None:
                module, l, buckets = rel_value
                z = z + module.term(l, buckets, pattern)
        z = self.hook_z(z.transpose(1, 2))  # (B, T, H, D)
        return self.o(z.reshape(B, T, self.H * self.D))


class GEGLU(nn.Module):
    def __init__(self, cfg, l):
        super().__init__()
        self.F = cfg.d_ff
        self.wi = nn.Linear(cfg.d_model, 2 * self.F, bias=False)
        self.wo = nn.Linear(self.F, cfg.d_model, bias=False)
        p = "blocks.%d.mlp." % l
        self.hook_pre, self.hook_pre_linear, self.hook_post = (HookPoint(p + n) for n in (
            "hook_pre", "hook_pre_linear", "hook_post"))

    def forward(self, x):
        h = self.wi(x)
        gate, up = self.hook_pre(h[..., :self.F]), self.hook_pre_linear(h[..., self.F:])
        return self.wo(self.hook_post(F.gelu(gate, approximate="tanh") * up))


class Block(nn.Module):
    def __init__(self, cfg, l):
        super().__init__()
        C, eps, p = cfg.d_model, cfg.norm_eps, "blocks.%d." % l
        self.attn_norm1 = RMSNorm(C, eps, p + "ln1.hook_normalized")
        self.attn = Attention(cfg, l)
        self.attn_norm2 = RMSNorm(C, eps, None)
        self.ffn_norm1 = RMSNorm(C, eps, p + "ln2.hook_normalized")
        self.ffn = GEGLU(cfg, l)
        self.ffn_norm2 = RMSNorm(C, eps, None)
        for n in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, "hook_" + n, HookPoint(p + "hook_" + n))
        if cfg.pos_mode == "coupled_rel":
            self.hook_rel_bias = HookPoint(p + "hook_rel_bias")

    def forward(self, x, bias=None, rel_value=None):
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(self.attn_norm2(x + self.hook_attn_out(self.attn(self.attn_norm1(x), bias, rel_value))))
        return self.hook_resid_post(self.ffn_norm2(x + self.hook_mlp_out(self.ffn(self.ffn_norm1(x)))))


class LearnedTransformer(HookedModule):
    """learn/'s decoder-only transformer for one LearnedConfig (weights: load_learned, or load_state_dict)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        C, V = cfg.d_model, cfg.vocab
        self.tok_emb = nn.Embedding(V, C)
        self.pos_emb = nn.ModuleList(nn.Embedding(cfg.max_pos[lv] + 1, C) for lv in range(cfg.tables))
        self.fire = Fire(cfg) if cfg.pos_mode == "fire" else None
        self.rel_bias = CoupledRelBias(cfg) if cfg.pos_mode == "coupled_rel" else None
        self.rel_value = CoupledRelValue(cfg) if getattr(cfg, "rel_value", False) else None
        self.layers = nn.ModuleList(Block(cfg, l) for l in range(cfg.n_layers))
        self.final_norm = {"rms": RMSNorm, "layer": LayerNorm}[cfg.final_norm](C, cfg.norm_eps,
                                                                                 "ln_final.hook_normalized")
        if cfg.tie_readout:
            # the C++ multiplies by the float 1 / sqrt(float(d_model)) (learn/src/decoder/model.cpp readout_scale)
            self.register_buffer("readout_scale", 1.0 / torch.tensor(float(C), dtype=torch.float32).sqrt(),
                                 persistent=False)
            self.lm_head = None
        else:
            self.lm_head = nn.Linear(C, V, bias=False)
        self.hook_embed, self.hook_logits = HookPoint("hook_embed"), HookPoint("hook_logits")
        self.hook_pos_embed = HookPoint("hook_pos_embed") if cfg.tables else None
        self.hook_fire_bias = HookPoint("hook_fire_bias") if self.fire is not None else None
        self._setup_hooks()

    def set_fused_attention(self, on=True):
        """Use torch's scaled_dot_product_attention (torch >= 2.0) where no hook reads the scores or the
        pattern: faster on a GPU, same mathematics (bench/torch_twin.py's benchmark uses it)."""
        for blk in self.layers:
            blk.attn.fused = bool(on)
        return self

    def forward(self, tokens, pos=None):
        """tokens (B, T) or (T,) ids; pos: one (B, T) or (T,) tensor/list per position level (None for
        pos_mode none, fire, rope). Returns logits (B, T, 14) (or (T, 14))."""
        tok, pos, squeeze = self._batch(tokens, pos, self.cfg.levels, self.cfg.max_pos, self.cfg.vocab)
        x = self.hook_embed(self.tok_emb(tok))
        if self.cfg.tables:
            pe = self.pos_emb[0](pos[0])
            for lv in range(1, self.cfg.tables):
                pe = pe + self.pos_emb[lv](pos[lv])
            # tok + (pos_1 + pos_2); the C++ adds (tok + pos_1) + pos_2: the same up to one rounding.
            x = x + self.hook_pos_embed(pe)
        bias = self.hook_fire_bias(self.fire(tok.shape[1])) if self.fire is not None else None
        x0 = x
        buckets = coupled_rel_buckets(pos, self.cfg.rel_window, self.cfg.rel_far) if self.rel_value is not None else None
        for l, blk in enumerate(self.layers):
            if self.cfg.input_injection and l > 0:
                x = x + x0
            if self.rel_bias is not None:  # each layer's own gains: (B, H, T, T)
                bias = blk.hook_rel_bias(self.rel_bias(l, pos))
            x = blk(x, bias, (self.rel_value, l, buckets) if self.rel_value is not None else None)
        xf = self.final_norm(x)
        if self.lm_head is None:  # tied: T5's readout through the token table
            logits = self.hook_logits((xf * self.readout_scale) @ self.tok_emb.weight.t())
        else:
            logits = self.hook_logits(self.lm_head(xf))
        return logits[0] if squeeze else logits

    # ---- the task ----------------------------------------------------------------------------------

    def example(self, problem, s1=1, s2=1, s3=1):
        """learn's input for a problem of the model's task (addition: its own shape, minimal padding) at
        offsets (s1, s2, s3): a format.Example whose tokens (1, N) and pos (levels x (1, N)) are long
        tensors on the model's device and targets a list (the next token from '=' on, -1 on the query)."""
        if self.cfg.task == "addition":
            ex = fmt.make_example(problem, self.cfg.pos_mode, self.cfg.max_pos, s1, s2)
        else:
            ex = fmt.make_task_example(self.cfg.task, problem, self.cfg.pos_mode, self.cfg.max_pos, (s1, s2, s3))
        dev = self._device()
        ex.tokens = torch.tensor([ex.tokens], dtype=torch.long, device=dev)
        ex.pos = [torch.tensor([p], dtype=torch.long, device=dev) for p in ex.pos]
        return ex

    def teacher_forced(self, problem, s1=1, s2=1):
        """The argmax prediction at every response position, as `evaluate --problem` prints it."""
        return self._teacher_forced(self.example(problem, s1, s2))

    def generate(self, problem, s1=1, s2=1):
        """Greedy decoding from the query through '=' (a full forward per step), at most the response
        length, stopping after EOS: the string `evaluate --problem` prints as greedy."""
        return self._greedy(self.example(problem, s1, s2))


def load_learned(model_dir, device="cpu", dtype=torch.float32, checkpoint=False):
    """The model of a `train` output directory (config.json + model.safetensors, or checkpoint.safetensors
    with checkpoint=True) in eval mode. dtype float32 reproduces the C++ (fp32); float64 runs the same
    weights in double. config.json and the weights' names and shapes are checked by manyadd.strict (the
    C++ reader's rules) before anything is built; the file is read by manyadd.safetensors (every check,
    the checksum verified)."""
    config, tensors, meta = strict.read_learned_dir(model_dir, checkpoint)
    cfg = LearnedConfig(config["model"], config["train"])
    model = LearnedTransformer(cfg)
    sd = model.state_dict()
    missing = sorted(set(sd) - set(tensors))
    if missing:
        raise InputError("%s: model.safetensors lacks %s (config.json says %r)" % (model_dir, ", ".join(missing[:4]), cfg))
    extra = sorted(k for k in set(tensors) - set(sd) if not k.startswith("adam."))
    if extra:
        raise InputError("%s: model.safetensors holds tensors this config does not use: %s" % (model_dir, ", ".join(extra[:4])))
    for k, v in sd.items():
        if tuple(tensors[k].shape) != tuple(v.shape):
            raise InputError("%s: tensor %s has shape %s, config.json implies %s" % (
                model_dir, k, tuple(tensors[k].shape), tuple(v.shape)))
    model.load_state_dict({k: torch.from_numpy(tensors[k]) for k in sd})
    model.metadata = meta
    model.tensors = {k: v for k, v in tensors.items() if k not in sd}  # e.g. the Adam moments of a checkpoint
    return model.to(device=device, dtype=dtype).eval()
