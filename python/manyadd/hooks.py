"""TransformerLens-style hook points for the project's torch modules (manyadd.learned, manyadd.constructed).

A HookPoint is an identity module placed on an activation; its name is the TransformerLens-style name
(`blocks.0.attn.hook_pattern`), which need not be its module path: the modules keep the parameter names
of model.safetensors (`layers.0.attn.q.weight`), so `load_state_dict` takes the file as it is. Hooks are
ordinary torch forward hooks on the HookPoint (a hook that returns a tensor replaces the activation).

    logits, cache = model.run_with_cache(tokens, pos)                       # every activation
    logits, cache = model.run_with_cache(tokens, pos, names_filter="hook_pattern")
    logits = model.run_with_hooks(tokens, pos, fwd_hooks=[("blocks.0.attn.hook_pattern", fn)])
        # fn(activation, hook) -> None or a replacement tensor
    model.hook_dict                                                          # {name: HookPoint}
"""
import contextlib

import torch
from torch import nn

__all__ = ["HookPoint", "HookedModule"]


class HookPoint(nn.Module):
    """Identity on an activation, named for hooks."""

    def __init__(self, name):
        super().__init__()
        self.name = name

    def forward(self, x):
        return x

    def has_hooks(self):
        return bool(self._forward_hooks)

    def extra_repr(self):
        return self.name


def _filter(names_filter):
    if names_filter is None:
        return lambda name: True
    if isinstance(names_filter, str):
        return lambda name: names_filter in name
    if callable(names_filter):
        return names_filter
    wanted = set(names_filter)
    return lambda name: name in wanted


class HookedModule(nn.Module):
    """Base of the project's models: collects the HookPoints (after the subclass built its modules, it
    calls _setup_hooks()) and runs with caches or hooks. Subclasses implement forward(tokens, pos).
    check_inputs (default True) checks every token and position ID against the tables before a forward;
    a benchmark loop may turn it off (the check reads the values back from the device)."""

    check_inputs = True

    def _setup_hooks(self):
        self.hook_dict = {}
        for m in self.modules():
            if isinstance(m, HookPoint):
                if m.name in self.hook_dict:
                    raise RuntimeError("two hook points named %s" % m.name)
                self.hook_dict[m.name] = m

    @contextlib.contextmanager
    def hooks(self, fwd_hooks=()):
        """Context in which fwd_hooks [(name or predicate on names, fn(activation, hook))] are attached."""
        handles = []
        try:
            for key, fn in fwd_hooks:
                match = (lambda n, key=key: n == key) if isinstance(key, str) else key
                found = [hp for n, hp in self.hook_dict.items() if match(n)]
                if isinstance(key, str) and not found:
                    raise KeyError("no hook point named %r (model.hook_dict lists them)" % key)
                for hp in found:
                    handles.append(hp.register_forward_hook(lambda mod, inp, out, fn=fn: fn(out, hook=mod)))
            yield self
        finally:
            for h in handles:
                h.remove()

    def run_with_hooks(self, tokens, pos=None, fwd_hooks=()):
        with self.hooks(fwd_hooks):
            return self(tokens, pos)

    def run_with_cache(self, tokens, pos=None, names_filter=None, device=None):
        """(logits, cache): cache maps every hook name that names_filter accepts (None: all; a string:
        names containing it; a list: those names; a callable: a predicate) to its activation, detached
        (moved to `device` if given). Grad mode is the caller's (wrap in torch.no_grad() to save memory)."""
        cache = {}
        keep = _filter(names_filter)

        def save(act, hook):
            a = act.detach()
            cache[hook.name] = a.to(device) if device is not None else a
        with self.hooks([(keep, save)]):
            logits = self(tokens, pos)
        return logits, cache

    # ---- shared input handling ----------------------------------------------------------------------

    def _batch(self, tokens, pos, levels, max_pos, vocab):
        """tokens (B, T) or (T,) ints; pos: None (levels 0), a sequence of `levels` tensors/lists shaped
        like tokens, or a tensor (levels, ...) -> (tokens (B, T) long, [pos (B, T) long] * levels,
        squeeze), every value checked against the tables (ValueError naming the problem)."""
        dev = self._device()
        tok = torch.as_tensor(tokens, device=dev)
        shape_in = tuple(tok.shape)
        if tok.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise ValueError("tokens must be integer ids (got dtype %s)" % tok.dtype)
        squeeze = tok.dim() == 1
        if squeeze:
            tok = tok.unsqueeze(0)
        if tok.dim() != 2 or tok.shape[1] < 1:
            raise ValueError("tokens must be (B, T) or (T,) with T >= 1 (got shape %s)" % (tuple(tok.shape),))
        tok = tok.long()
        check = getattr(self, "check_inputs", True)
        if check and (int(tok.min()) < 0 or int(tok.max()) >= vocab):
            raise ValueError("token ids must lie in [0, %d)" % vocab)
        if pos is None:
            pos = []
        elif isinstance(pos, torch.Tensor) and tuple(pos.shape) == shape_in:
            pos = [pos]  # one level given as a bare tensor shaped like the tokens
        pos = list(pos)
        if len(pos) != levels:
            raise ValueError("this model reads %d position-ID level(s), got %d" % (levels, len(pos)))
        out = []
        for lv, p in enumerate(pos):
            p = torch.as_tensor(p, device=dev)
            if squeeze and p.dim() == 1:
                p = p.unsqueeze(0)
            if p.shape != tok.shape:
                raise ValueError("position IDs of level %d have shape %s, tokens %s" % (
                    lv + 1, tuple(p.shape), tuple(tok.shape)))
            p = p.long()
            if check and (int(p.min()) < 0 or int(p.max()) > max_pos[lv]):
                raise ValueError("position ID %d of level %d outside [0, %d]: the model's max_pos%d is too small "
                                 "for this shape" % (int(p.max()) if int(p.max()) > max_pos[lv] else int(p.min()),
                                                     lv + 1, max_pos[lv], lv + 1))
            out.append(p)
        return tok, out, squeeze

    # ---- decoding, shared by the models (ex: a format.Example with tensors (1, N)) ---------------------

    @torch.no_grad()
    def _teacher_forced(self, ex):
        """The argmax prediction at every response position (from '=' on) of the correct sequence."""
        from . import format as fmt
        return fmt.decode(self(ex.tokens, ex.pos)[0, ex.shape.eq_index:].argmax(-1))

    @torch.no_grad()
    def _greedy(self, ex):
        """Greedy decoding from the query through '=', one token at a time (a full forward per step; the IDs
        of every position are known from the shape), at most the response length, stopping after EOS."""
        from . import format as fmt
        eq = ex.shape.eq_index
        seq, out = ex.tokens[:, :eq + 1], []
        for _ in range(ex.shape.response_len):
            t = seq.shape[1]
            nxt = int(self(seq, [p[:, :t] for p in ex.pos])[0, -1].argmax())
            out.append(nxt)
            if nxt == fmt.EOS or t == ex.shape.N:
                break
            seq = torch.cat([seq, torch.tensor([[nxt]], dtype=torch.long, device=seq.device)], dim=1)
        return fmt.decode(out)

    def _device(self):
        for p in self.parameters():
            return p.device
        return torch.device("cpu")
