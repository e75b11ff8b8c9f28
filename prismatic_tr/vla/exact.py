"""Exact savings: work OpenVLA does whose result it throws away, removed without changing any output.

OpenVLA's towers take the output of block ``depth - 2`` but ``get_intermediate_layers`` runs every block,
the last one too (1 / 24 of DINOv2-L's blocks and 1 / 27 of SigLIP-so400m's). The native model stops after
block ``depth - 2`` by construction (:mod:`prismatic_tr.models.vision`); :func:`apply_exact_savings` gives
OpenVLA's remote-code model the same (each tower's instance ``forward`` replaced, undoably), and
:func:`run_last_block` switches the native model back to OpenVLA's behaviour (to time what is saved). The
other exact saving, the LM head on the last prompt position only during the prefill, is built into the native
model's generation (:func:`prismatic_tr.models.generation.prefill`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from prismatic_tr.vit.penultimate import PenultimateForward
from prismatic_tr.vla.locate import backbone_towers, find_vision_backbone

_SAVED_ATTR = "_prismatic_tr_exact_saved"


def _towers(vla: nn.Module) -> list[nn.Module]:
    return backbone_towers(find_vision_backbone(vla).backbone, "exact savings")


SavedForward = tuple[nn.Module, bool, Any]  # (module, had its own instance forward, that forward)


def replace_forward(module: nn.Module, forward: Any) -> SavedForward:
    """Set ``module``'s instance ``forward`` (hooks in ``Module.__call__`` still run); returns what to restore."""
    saved = (module, "forward" in module.__dict__, module.__dict__.get("forward"))
    module.__dict__["forward"] = forward
    return saved


def restore_forward(saved: SavedForward) -> None:
    """Undo :func:`replace_forward`: the module's instance ``forward`` exactly as it was (or none)."""
    module, had_own, old = saved
    if had_own:
        module.__dict__["forward"] = old
    else:
        module.__dict__.pop("forward", None)


class ExactSavingsHandle:
    """Undo handle of :func:`apply_exact_savings` (also a context manager)."""

    def __init__(self, saved: list[SavedForward]) -> None:
        self._saved = saved

    def remove(self) -> None:
        """Put every tower's ``forward`` back exactly as it was; safe to call twice."""
        for saved in self._saved:
            restore_forward(saved)
            saved[0].__dict__.pop(_SAVED_ATTR, None)
        self._saved = []

    def __enter__(self) -> ExactSavingsHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _set_forward(vla: nn.Module, run_last: bool) -> ExactSavingsHandle:
    return ExactSavingsHandle([replace_forward(t, PenultimateForward(t, run_last_block=run_last)) for t in _towers(vla)])


def apply_exact_savings(vla: nn.Module) -> ExactSavingsHandle:
    """Towers stop after block ``depth - 2`` (the block OpenVLA keeps); outputs bit-identical, ``remove()`` undoes."""
    return _set_forward(vla, run_last=False)


def run_last_block(vla: nn.Module) -> ExactSavingsHandle:
    """Towers run every block as OpenVLA's ``get_intermediate_layers`` does (same outputs, more work); undoable."""
    return _set_forward(vla, run_last=True)
