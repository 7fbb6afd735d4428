"""The constructed model of Theorem 4.1 (construct/) as a torch module: load_constructed(DIR) reads what
`verify_construction --export DIR` writes (model.safetensors, F64, + config.json, whose "architecture"
section states the forward) and runs it, by default in float64 as the C++ dense engine does.

    from manyadd import load_constructed
    model = load_constructed("out/worked")                 # verify_construction --n 2 --m 3 --export out/worked ...
    model.generate("57+48+96", s1=4, s2=2)                 # '000>750>501>102$'
    ex = model.example("57+48+96", s1=4, s2=2)
    logits, cache = model.run_with_cache(ex.tokens, ex.pos)
    cache["blocks.0.hook_resid_mid"][0, :, model.dim("PRE_SUM")]   # head 1's output (paper Table 21)

The forward (one layer, four heads, no normalization; rows are tokens; B batch, T tokens, d residual):
    X0 = embed.token[tok] + embed.pos1[p1] + embed.pos2[p2]
    per head h: score(j, i) = (Q_h x_j) . (K_h x_i) for keys i <= j (lambda_h is folded into Q_h and K_h),
                A_h = softmax over i;  z_h = A_h (X0 V_h^T)       (V_h: (1, d), U_h: (d, 1))
    Y  = X0 + sum_h z_h U_h^T
    X1 = Y + relu(Y W1^T + b1) W2^T + b2
    logits = X1 Wout^T;  next token = argmax (lowest id on ties)

Hook points (TransformerLens names; the residual dimensions are named in model.residual_dims, the
paper's NUM, IS_BOS, ..., POS_2_NEXT; model.dim(name) is the index, e.g. model.dim("POS_1_NEXT[0]")):
    hook_embed (B, T, d) token part      hook_pos_embed (B, T, d) position part (pos1 + pos2 rows)
    blocks.0.hook_resid_pre (B, T, d) = X0
    blocks.0.attn.hook_q / hook_k (B, T, 4, d_qk): Q_h x, K_h x; heads with fewer query/key rows (head 3,
        level 1 only) are zero-padded to the widest, which adds nothing to any score
    blocks.0.attn.hook_v (B, T, 4, 1)    blocks.0.attn.hook_attn_scores (B, 4, T, T) (-inf above the diagonal)
    blocks.0.attn.hook_pattern (B, 4, T, T)   blocks.0.attn.hook_z (B, T, 4, 1)
    blocks.0.hook_attn_out (B, T, d) = sum_h z_h U_h^T    blocks.0.hook_resid_mid (B, T, d) = Y
    blocks.0.mlp.hook_pre (B, T, 82) before the ReLU      blocks.0.mlp.hook_post (B, T, 82) after it
    blocks.0.hook_mlp_out (B, T, d)      blocks.0.hook_resid_post (B, T, d) = X1     hook_logits (B, T, 14)
"""
import torch
from torch import nn

from . import format as fmt
from . import strict
from .files import InputError
from .hooks import HookedModule, HookPoint

__all__ = ["ConstructedTransformer", "load_constructed"]


class ConstructedTransformer(HookedModule):
    """The Theorem 4.1 model from its exported tensors ({name: tensor}) and config.json (a dict)."""

    def __init__(self, tensors, config):
        super().__init__()
        self.config = config
        self.residual_dims = list(config["residual_dims"])
        self.hidden_units = list(config.get("hidden_units", []))
        self.head_names = [h["name"] for h in config["heads"]]
        pos = config["position_ids"]
        self.max_pos = (int(pos["max_pos1"]), int(pos["max_pos2"]))
        d = len(self.residual_dims)
        self.embed_token = nn.Parameter(tensors["embed.token"], requires_grad=False)
        self.embed_pos1 = nn.Parameter(tensors["embed.pos1"], requires_grad=False)
        self.embed_pos2 = nn.Parameter(tensors["embed.pos2"], requires_grad=False)
        H = len(self.head_names)
        dqk = max(tensors["heads.%d.Q" % (h + 1)].shape[0] for h in range(H))

        def stack(name, rows):  # (H, rows, d), zero rows below a head's own
            out = torch.zeros(H, rows, d, dtype=tensors["embed.token"].dtype)
            for h in range(H):
                t = tensors["heads.%d.%s" % (h + 1, name)]
                out[h, :t.shape[0]] = t
            return nn.Parameter(out, requires_grad=False)
        self.Q, self.K, self.V = stack("Q", dqk), stack("K", dqk), stack("V", 1)
        self.U = nn.Parameter(torch.stack([tensors["heads.%d.U" % (h + 1)][:, 0] for h in range(H)]),
                              requires_grad=False)  # (H, d): head h writes z_h U_h
        for k in ("W1", "b1", "W2", "b2"):
            setattr(self, k, nn.Parameter(tensors["ffn." + k], requires_grad=False))
        self.Wout = nn.Parameter(tensors["readout.Wout"], requires_grad=False)
        for n in ("hook_embed", "hook_pos_embed", "hook_logits"):
            setattr(self, n, HookPoint(n))
        self.hooks_block = nn.ModuleDict({n: HookPoint("blocks.0." + n) for n in (
            "hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")})
        self.hooks_attn = nn.ModuleDict({n: HookPoint("blocks.0.attn." + n) for n in (
            "hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z")})
        self.hooks_mlp = nn.ModuleDict({n: HookPoint("blocks.0.mlp." + n) for n in ("hook_pre", "hook_post")})
        self._setup_hooks()

    def dim(self, name):
        """Index of a named residual dimension (NUM, IS_BOS, FULL_ONES, PRE_SUM, ..., "POS_1_NEXT[0]", ...)."""
        try:
            return self.residual_dims.index(name)
        except ValueError:
            raise KeyError("no residual dimension %r (model.residual_dims lists them)" % name) from None

    def forward(self, tokens, pos):
        """tokens (B, T) or (T,) ids; pos = (p1, p2), each shaped like tokens. Returns logits (B, T, 14)."""
        tok, (p1, p2), squeeze = self._batch(tokens, pos, 2, self.max_pos, self.embed_token.shape[0])
        hb, ha, hm = self.hooks_block, self.hooks_attn, self.hooks_mlp
        x0 = self.hook_embed(self.embed_token[tok]) + self.hook_pos_embed(self.embed_pos1[p1] + self.embed_pos2[p2])
        x0 = hb["hook_resid_pre"](x0)
        T = tok.shape[1]
        q = ha["hook_q"](torch.einsum("btd,hed->bthe", x0, self.Q))
        k = ha["hook_k"](torch.einsum("btd,hed->bthe", x0, self.K))
        v = ha["hook_v"](torch.einsum("btd,hed->bthe", x0, self.V))
        s = torch.einsum("bjhe,bihe->bhji", q, k)  # (B, H, query j, key i)
        mask = torch.ones(T, T, dtype=torch.bool, device=tok.device).triu(1)
        s = ha["hook_attn_scores"](s.masked_fill(mask, float("-inf")))
        a = ha["hook_pattern"](torch.softmax(s, dim=-1))
        z = ha["hook_z"](torch.einsum("bhji,bihe->bjhe", a, v))  # (B, T, H, 1)
        y = hb["hook_resid_mid"](x0 + hb["hook_attn_out"](torch.einsum("bthe,hd->btd", z, self.U)))
        hid = hm["hook_post"](torch.relu(hm["hook_pre"](y @ self.W1.T + self.b1)))
        x1 = hb["hook_resid_post"](y + hb["hook_mlp_out"](hid @ self.W2.T + self.b2))
        logits = self.hook_logits(x1 @ self.Wout.T)
        return logits[0] if squeeze else logits

    # ---- the task ----------------------------------------------------------------------------------

    def shape_for(self, problem, width=None):
        """The shape a problem is written in for this model: the exported shape when the operand count
        matches and the operands fit it, else the problem's own (n = longest operand) with the model's
        padding rule; `width` forces l."""
        ops = fmt.parse_problem(problem)
        n, m = max(len(o) for o in ops), len(ops)
        shape = self.config.get("shape")
        rule = (self.config.get("padding") or {}).get("rule") or "theorem"
        if shape and shape.get("m") == m and n <= shape.get("n", 0):
            s = fmt.Shape.make(shape["n"], m, rule)
        else:
            s = fmt.Shape.make(n, m, rule)
        if width is not None:
            if isinstance(width, bool) or not isinstance(width, int) or width < n:
                raise InputError("width l = %r is below the longest operand (%d digits)" % (width, n))
            s = fmt.Shape(min(s.n, width), m, width, s.padding)
        return s

    def example(self, problem, s1=1, s2=1, width=None):
        """The teacher-forced input (format.Example with tokens (1, N) and pos [(1, N), (1, N)] long
        tensors) at offsets s1 in [1, max_pos1 - l], s2 in [1, max_pos2 - m]."""
        shape = self.shape_for(problem, width)
        if not (1 <= s1 <= self.max_pos[0] - shape.l and 1 <= s2 <= self.max_pos[1] - shape.m):
            raise InputError("offsets need s1 in [1, %d] and s2 in [1, %d] for l = %d, m = %d (got %d, %d)" % (
                self.max_pos[0] - shape.l, self.max_pos[1] - shape.m, shape.l, shape.m, s1, s2))
        tokens = fmt.build_sequence(problem, shape)
        p1, p2 = fmt.position_ids(shape, s1, s2)
        eq = shape.eq_index
        dev = self._device()
        as_t = lambda v: torch.tensor([v], dtype=torch.long, device=dev)  # noqa: E731
        return fmt.Example(as_t(tokens), [as_t(p1), as_t(p2)], [-1] * eq + tokens[eq + 1:] + [fmt.EOS], shape, s1, s2)

    def teacher_forced(self, problem, s1=1, s2=1, width=None):
        """The argmax prediction at every response position (from '=' on) of the correct sequence."""
        return self._teacher_forced(self.example(problem, s1, s2, width))

    def generate(self, problem, s1=1, s2=1, width=None):
        """Greedy decoding from the query through '=' (a full forward per step), at most the response
        length, stopping after EOS."""
        return self._greedy(self.example(problem, s1, s2, width))


def load_constructed(model_dir, device="cpu", dtype=torch.float64):
    """The model `verify_construction --export DIR` wrote, in eval mode (float64 by default, as exported;
    float32 runs the dense engine's float arithmetic up to summation order). config.json is checked against
    what the exporter writes and the tensors' names and shapes against it (manyadd.strict) first."""
    config, arrays = strict.read_constructed_dir(model_dir)  # config.json and the tensors' names and shapes
    tensors = {k: torch.from_numpy(arrays[k]).to(torch.float64) for k in arrays}
    return ConstructedTransformer(tensors, config).to(device=device, dtype=dtype).eval()
