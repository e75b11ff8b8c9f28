"""The ``vision`` and ``llm`` sites on an OpenVLA model, with the projector site's handle contract.

* :class:`VisionSiteHandle`: :func:`prismatic_tr.vit.shared.apply_shared_selection` on the backbone's towers
  (``featurizer`` scores, ``fused_featurizer`` follows), so the blocks after ``depth_fraction`` of each tower
  and the projector run on the kept patches; the backbone reports the kept count per image
  (``get_num_patches()``), as with the projector site, in whose slot it sits.
* :class:`LLMSiteHandle`: :func:`prismatic_tr.llm.apply_llm_pruning` on ``language_model`` before layer
  ``round(depth_fraction * layers)``; a forward hook on the projector tells it how many visual tokens the
  current call has. The projector still receives every visual token, so the reported counts do not change.
  The pruned layers hold the kept positions only: OpenVLA's autoregressive action tokens (the last position's
  logits) are exact consumers; code that reads every position's hidden state (OpenVLA-OFT's action heads)
  must not use this site.

Both: no parameter or ``state_dict`` key added, ``remove()`` (or leaving a ``with`` block) restores the
model exactly, settings mirrored in ``vla.config.token_reduction``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prismatic_tr.llm import LLMPruningHandle, apply_llm_pruning
from prismatic_tr.vit.shared import SharedSelectionHandle, apply_shared_selection, check_towers
from prismatic_tr.vla.locate import BackboneInfo, images_in_input
from prismatic_tr.vla.registry import LLM_HANDLE_ATTR, claim_backbone_slot, release_backbone_slot, sync_config
from prismatic_tr.vla.settings import TokenReductionSettings


class _SiteHandle:
    """Shared contract: ``settings``, ``info``, ``removed``, ``attach()``, ``remove()``, context manager."""

    def __init__(self, info: BackboneInfo, settings: TokenReductionSettings) -> None:
        self.info, self.settings, self.removed = info, settings, True

    @property
    def backbone(self) -> nn.Module:
        return self.info.backbone

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings.label}, keep={self.settings.reduction_ratio}, " \
               f"{'removed' if self.removed else 'attached'})"


def backbone_towers(backbone: nn.Module) -> list[nn.Module]:
    """The timm towers of an OpenVLA backbone, the first (``featurizer``) first; ValueError if it has none."""
    towers = [t for t in (getattr(backbone, "featurizer", None), getattr(backbone, "fused_featurizer", None))
              if t is not None]
    if not towers:
        raise ValueError(f"{type(backbone).__name__} has no featurizer / fused_featurizer towers; the vision site "
                         "needs OpenVLA's backbone layout")
    return towers


class VisionSiteHandle(_SiteHandle):
    """Token selection inside the vision towers (see the module docstring)."""

    def __init__(self, info: BackboneInfo, settings: TokenReductionSettings) -> None:
        super().__init__(info, settings)
        self.towers = backbone_towers(info.backbone)
        check_towers(self.towers)  # fails now, before anything is changed
        self.selection: SharedSelectionHandle | None = None

    @property
    def patches_per_image(self) -> int:
        return int(self.towers[0].patch_embed.num_patches)

    def reduced_num_patches_per_image(self) -> int:
        from prismatic_tr.reducers.config import num_kept

        return num_kept(self.patches_per_image, self.settings.reduction_ratio)

    def reduced_num_patches(self) -> int:
        return self.reduced_num_patches_per_image() * images_in_input(self.backbone)

    def attach(self) -> VisionSiteHandle:
        s = self.settings
        self.selection = apply_shared_selection(self.towers, s.depth_fraction, s.reduction_ratio, s.method)
        claim_backbone_slot(self)
        return self

    def remove(self) -> None:
        if self.removed:
            return
        self.selection.remove()
        release_backbone_slot(self)


def llm_layer(num_layers: int, depth_fraction: float) -> int:
    """Decoder layer the llm site prunes before: ``round(f * layers)`` within [1, layers - 1]."""
    return min(num_layers - 1, max(1, round(depth_fraction * num_layers)))


class LLMSiteHandle(_SiteHandle):
    """Visual-token pruning inside the language model (see the module docstring)."""

    def __init__(self, info: BackboneInfo, settings: TokenReductionSettings) -> None:
        super().__init__(info, settings)
        lm = getattr(info.model, "language_model", None)
        layers = getattr(getattr(lm, "model", None), "layers", None)
        if layers is None or len(layers) < 2:
            raise ValueError(f"{type(info.model).__name__}.language_model is not a Llama-style decoder with at least "
                             "2 layers; the llm site needs one")
        self.lm, self.layer = lm, llm_layer(len(layers), settings.depth_fraction)
        self._num_visual: int | None = None
        self.pruning: LLMPruningHandle | None = None
        self._projector_hook: Any = None

    def _record(self, module: nn.Module, args: Any, out: torch.Tensor) -> None:
        self._num_visual = int(out.shape[1])

    def _take(self) -> int | None:
        """K of the current call, consumed by the prefill that uses it (a text-only call then sees None)."""
        k, self._num_visual = self._num_visual, None
        return k

    @property
    def last_kept(self) -> torch.Tensor | None:
        return self.pruning.last_kept if self.pruning is not None else None

    def attach(self) -> LLMSiteHandle:
        self._projector_hook = self.info.model.projector.register_forward_hook(self._record)
        self.pruning = apply_llm_pruning(self.lm, self.layer, self.settings.reduction_ratio, self._take,
                                         self.settings.num_queries)
        self.info.model.__dict__[LLM_HANDLE_ATTR] = self
        self.removed = False
        sync_config(self.info.model)
        return self

    def remove(self) -> None:
        if self.removed:
            return
        self.pruning.remove()
        self._projector_hook.remove()
        self.info.model.__dict__.pop(LLM_HANDLE_ATTR, None)
        self.removed = True
        sync_config(self.info.model)
