"""The ``llm`` site: visual-token pruning inside the language model during a generation prefill, undoably.

:func:`prismatic_tr.llm.apply_llm_pruning` on ``language_model`` before layer ``round(depth_fraction * layers)``;
a forward hook on the projector tells it how many visual tokens the current call has, through the call's record
(:mod:`prismatic_tr.vla.scope`: a projector run outside a top-level call, or in an earlier one, tells it nothing). The projector still
receives every visual token, so the reported counts do not change. Only a generation's prefill is pruned (see
:mod:`prismatic_tr.llm.patch`): a plain forward, with or without labels, equals the unreduced model. The pruned
layers hold the kept positions only, at their original position ids: OpenVLA's autoregressive action tokens (the
last position's logits) are exact consumers. The native OpenVLA-OFT model announces its one parallel pass as a
prefill: the visual tokens are dropped after the layer for the rest of that pass, and it reads its action slots
behind them (:func:`prismatic_tr.models.oft.run_decoder`). OFT's own model code reads the slots at fixed
offsets, so attaching the site there is refused.

No parameter or ``state_dict`` key added, ``remove()`` (or leaving a ``with`` block) restores the model exactly,
settings mirrored in ``vla.config.token_reduction``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prismatic_tr.calls import CallRecord
from prismatic_tr.llm import LLMPruningHandle, apply_llm_pruning
from prismatic_tr.models.family import family_of
from prismatic_tr.vla.locate import BackboneInfo
from prismatic_tr.vla.registry import LLM_HANDLE_ATTR, sync_config
from prismatic_tr.vla.settings import Setting
from prismatic_tr.vla.sites.base import SiteHandle


def llm_layer(num_layers: int, depth_fraction: float) -> int:
    """Decoder layer the llm site prunes before: ``round(f * layers)`` within [1, layers - 1]."""
    return min(num_layers - 1, max(1, round(depth_fraction * num_layers)))


class LLMSiteHandle(SiteHandle):
    """Visual-token pruning inside the language model (see the module docstring)."""

    def __init__(self, info: BackboneInfo, settings: Setting) -> None:
        super().__init__(info, settings)
        if family_of(info.model).chunked and not getattr(info.model, "llm_site_in_pass", False):
            raise ValueError("the llm site cannot be attached to OpenVLA-OFT's own model code: it reads every action "
                             "position's hidden state at fixed offsets from one parallel forward, and the site "
                             "prunes positions; use the projector or vision site, or load the checkpoint natively "
                             "(prismatic_tr.models.load_vla: NativeOpenVLAOFT takes the llm site inside its pass)")
        lm = getattr(info.model, "language_model", None)
        layers = getattr(getattr(lm, "model", None), "layers", None)
        if layers is None or len(layers) < 2:
            raise ValueError(f"{type(info.model).__name__}.language_model is not a Llama-style decoder with at least "
                             "2 layers; the llm site needs one")
        self.lm, self.layer = lm, llm_layer(len(layers), settings.depth_fraction)
        self.pruning: LLMPruningHandle | None = None
        self._projector_hook: Any = None

    @property
    def cut(self) -> str:
        """e.g. "LLM after 2/8 layers" (those layers see every visual token)."""
        return f"LLM after {self.layer}/{len(self.lm.model.layers)} layers"

    def _record(self, module: nn.Module, args: Any, out: torch.Tensor) -> None:
        record = self.current_record()
        if record is not None:
            record.num_visual, record.count_taken = int(out.shape[1]), False

    def _take(self) -> int | None:
        """K of the current call, for its first fresh language-model call (a text-only call sees None)."""
        record = self.current_record()
        return record.take_count() if record is not None else None

    def _kept(self, kept: torch.Tensor) -> None:
        """The prefill chose ``kept`` (B, n): told to the current call's record (``call.llm_kept``)."""
        record = self.current_record()
        if record is not None:
            record.llm_kept = kept

    def attach(self) -> LLMSiteHandle:
        self._hold_scope()
        self._projector_hook = self.info.model.projector.register_forward_hook(self._record)
        def take() -> int | None:  # closures, not bound methods: torch 2.2's dynamo cannot call a bound method
            return self._take()  # passed in as a callback (fullgraph)

        def kept(indices: torch.Tensor) -> None:
            self._kept(indices)

        def record() -> CallRecord | None:
            return self.current_record()

        self.pruning = apply_llm_pruning(self.lm, self.layer, self.settings.keep_ratio, take,
                                         self.settings.num_queries, on_kept=kept, record=record)
        self.info.model.__dict__[LLM_HANDLE_ATTR] = self
        self.removed = False
        sync_config(self.info.model)
        return self

    def remove(self) -> None:
        if self.removed:
            return
        self.pruning.remove()
        self._projector_hook.remove()
        self._drop_scope()
        self.info.model.__dict__.pop(LLM_HANDLE_ATTR, None)
        self.removed = True
        sync_config(self.info.model)
