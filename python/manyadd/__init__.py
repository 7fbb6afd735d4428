"""manyadd: the project's models, task format, files and figures from Python (python/README.md).

    from manyadd import load_learned, load_constructed
    model = load_learned("models/cpu-sa1010-1l4h-d64")            # torch.nn.Module, learn/'s forward
    ex = model.example("57+48+96")                                # tokens (1, N) and position IDs
    logits, cache = model.run_with_cache(ex.tokens, ex.pos)       # TransformerLens-style hook names
    cache["blocks.0.attn.hook_pattern"]                           # (1, heads, N, N) attention

Modules:
  format        the task format: sequences, padding, coupled position IDs (every learned mode), the
                samplers of the C++ tools (standard library only)
  learned       load_learned(DIR): the learned transformer of learn/ (torch)
  constructed   load_constructed(DIR): the Theorem 4.1 model `verify_construction --export` writes (torch)
  hooks         HookPoint, run_with_cache / run_with_hooks (torch)
  figures       matplotlib figures from the tools' files: python3 -m manyadd.figures --help
  view          the attention page of compare_attention --html from the torch models: python3 -m manyadd.view
  safetensors   the one Python reader and writer, validated as strictly as core/src/safetensors.cpp
  files         the atomic writer and InputError
  grids         the studies' numbers from evaluate's grid CSVs (cells >= 90%, longest n, most m, ...)
  sweep         a study's runs here or as a Slurm job array, and their table: python3 -m manyadd.sweep
Importing the package imports nothing outside the standard library; torch, numpy and matplotlib are
imported by the modules that need them (load_learned and load_constructed import torch on first use).
"""

__all__ = ["load_learned", "load_constructed"]


def __getattr__(name):
    if name == "load_learned":
        from .learned import load_learned
        return load_learned
    if name == "load_constructed":
        from .constructed import load_constructed
        return load_constructed
    raise AttributeError("module 'manyadd' has no attribute %r" % name)
