"""``benchmark.py --compile``: ``predict_action`` with the model's blocks compiled and every reduction hook eager.

Each transformer block of both vision towers, the projector and each decoder layer of the language model gets
its instance ``forward`` replaced by ``torch.compile(forward)``. Hooks run in ``Module.__call__``, outside
``forward``, so the reductions the benchmark attaches and removes between calls (forward hooks on the
backbone, on a tower block, pre-hooks on a decoder layer) stay eager and take effect on every call: nothing
compiled can go stale when a setting changes. Each block recompiles for each token count it sees (dynamo's
shape guards; static graphs, ``dynamic=False``), so a sweep compiles once per setting and count in its warm-up rounds; the
recompile limit is raised while the handle is live so that no block silently falls back to eager. The KV-cache
decode and the generation loop stay in Python, as in ``predict_action``.

``--freeze`` (``freeze=True``, inductor only): inductor's freezing while the handle is live, so every block compiles
with its weights as constants, folded and pre-packed once for oneDNN / MKL instead of re-laid-out on each call. On a
CPU that is a fixed cost of a matrix product that does not shrink with fewer tokens (``benchmarks/frozen_blocks.py``,
cpu-bench-oft's DINOv2 blocks, 2 threads, 2026-11-26: on the 2 x 31 rows a keep-0.1 cut leaves, 3.9 -> 3.0 ms per
block in bfloat16 and 11.1 -> 7.7 ms in float32, compiled -> frozen; on 2 x 261 rows 12.7 -> 12.7 and 58.9 -> 50.4).
Inference only: the compiled blocks keep the weights they saw at their first call, so nothing may change a weight
in place while the handle is live (the benchmark only attaches reductions, whose hooks stay eager).

``remove()`` puts every ``forward``, the dynamo limits and inductor's freezing back as they were.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prismatic_tr.vla.exact import SavedForward, replace_forward, restore_forward
from prismatic_tr.vla.locate import backbone_towers, find_vision_backbone

# Enough entries per code object for every block instance (torch 2.2 guards each instance apart) times the
# token counts of a sweep (each setting can give each block its own count).
RECOMPILE_LIMIT = 4096
_LIMIT_NAMES = ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit")


def compiled_modules(vla: nn.Module) -> list[nn.Module]:
    """The modules whose ``forward`` gets compiled: tower blocks, the projector, decoder layers (in that order)."""
    info = find_vision_backbone(vla)
    modules: list[nn.Module] = [block for tower in backbone_towers(info.backbone, "--compile") for block in tower.blocks]
    projector = getattr(info.model, "projector", None)
    if projector is not None:
        modules.append(projector)
    layers = getattr(getattr(getattr(info.model, "language_model", None), "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"{type(info.model).__name__} has no language_model.model.layers; --compile needs "
                         "OpenVLA's layout (a Llama-style language model)")
    modules.extend(layers)
    return modules


class CompiledBlocksHandle:
    """Undo handle of :func:`compile_blocks` (also a context manager)."""

    def __init__(self, saved: list[SavedForward], limits: dict[str, Any], freezing: bool | None = None) -> None:
        self._saved, self._limits, self._freezing = saved, limits, freezing

    def remove(self) -> None:
        """Put back every ``forward`` and the dynamo limits; safe to call twice."""
        for saved in self._saved:
            restore_forward(saved)
        self._saved = []
        for name, value in self._limits.items():
            setattr(torch._dynamo.config, name, value)
        self._limits = {}
        if self._freezing is not None:
            import torch._inductor.config as inductor_config

            inductor_config.freezing, self._freezing = self._freezing, None

    def __enter__(self) -> CompiledBlocksHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def compile_blocks(vla: nn.Module, backend: str = "inductor", freeze: bool = False) -> CompiledBlocksHandle:
    """Compile the forward of every module of :func:`compiled_modules` (lazily: on its first call); ``freeze``:
    with inductor's freezing (see the module docstring), which needs ``backend="inductor"``."""
    import torch._dynamo

    if freeze and backend != "inductor":
        raise ValueError(f"freeze=True is inductor's freezing; backend={backend!r} is not allowed with it")
    freezing = None
    if freeze:
        import torch._inductor.config as inductor_config

        freezing, inductor_config.freezing = inductor_config.freezing, True

    modules = compiled_modules(vla)
    limits = {n: getattr(torch._dynamo.config, n) for n in _LIMIT_NAMES if hasattr(torch._dynamo.config, n)}
    for name in limits:
        setattr(torch._dynamo.config, name, max(RECOMPILE_LIMIT, limits[name]))
    # dynamic=False: one static graph per token count (dynamic shapes turn transformers 4.40's `is_causal = q_len > 1`
    # into a SymBool that torch 2.2's SDPA refuses); the decode steps' lengths are few and the limit is raised.
    saved = [replace_forward(m, torch.compile(m.forward, backend=backend, dynamic=False)) for m in modules]
    return CompiledBlocksHandle(saved, limits, freezing)
