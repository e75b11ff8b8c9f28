"""What every site's handle is, and the one place where a reduction before the language model hands on its kept
tokens' positions.

:class:`SiteHandle`: ``settings``, ``info``, ``removed``, ``attach()``, ``remove()`` (exact undo), a context
manager; while attached it holds the model's call scope (:mod:`prismatic_tr.vla.scope`), so that what it hands
on lives for one top-level call. :class:`BackboneSlotHandle` (the ``projector`` and ``vision`` sites) adds the
backbone's slot (one such handle per backbone, the reduced count reported by ``get_num_patches()``) and the
position hand-off: after every forward of the backbone the site calls :meth:`BackboneSlotHandle.hand_on` with
where each visual token it passes on sits among the unreduced ones, which goes into the current call's record;
with ``positions="original"`` a :class:`prismatic_tr.llm.rope.PositionRemap` on the language model takes it at
the call's first fresh language-model call and gives those tokens, and every token after them, their unreduced
position ids (:func:`prismatic_tr.llm.positions.original_positions`). Outside a call nothing is handed on.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prismatic_tr.llm.rope import PositionRemap
from prismatic_tr.llm.sizes import ProportionalAttention
from prismatic_tr.models.wrappers import innermost_vla
from prismatic_tr.vla.locate import BackboneInfo, images_in_input
from prismatic_tr.vla.registry import claim_backbone_slot, release_backbone_slot
from prismatic_tr.vla.scope import CallRecord, CallScope, release_scope, use_scope
from prismatic_tr.vla.settings import Setting


class SiteHandle:
    """A live reduction at one site; ``remove()`` (or leaving a ``with`` block) restores the model exactly."""

    def __init__(self, info: BackboneInfo, settings: Setting) -> None:
        self.info, self.settings, self.removed = info, settings, True
        self.scope: CallScope | None = None

    @property
    def backbone(self) -> nn.Module:
        return self.info.backbone

    @property
    def cut(self) -> str:
        """Where this site removes tokens on this model, in blocks / layers actually run (a depth fraction is
        rounded to a block, differently for towers of different depth)."""
        raise NotImplementedError

    def attach(self) -> Any:
        raise NotImplementedError

    def remove(self) -> None:
        raise NotImplementedError

    def _hold_scope(self) -> None:
        """Install (or share) the model's call scope: what this site hands on lives for one top-level call."""
        self._scope_owner = innermost_vla(self.info.model)
        self.scope = use_scope(self._scope_owner)

    def _drop_scope(self) -> None:
        release_scope(self._scope_owner)
        self.scope = None

    def current_record(self) -> CallRecord | None:
        """The record of the top-level call running now (None outside one, or when detached)."""
        return self.scope.record if self.scope is not None else None

    def snapshot(self) -> Setting:
        """The settings as they stand now (a site that learns, the vision site's "learned", adds its state)."""
        return self.settings

    def scorer_parameters(self) -> list[nn.Parameter]:
        """Parameters the site owns and a fine-tuning run trains (none by default)."""
        return []

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings.label}, keep={self.settings.keep_ratio}, " \
               f"{'removed' if self.removed else 'attached'})"


def language_model(info: BackboneInfo) -> nn.Module:
    """The VLA's ``language_model`` (a transformers Llama); ValueError when it has none."""
    lm = getattr(info.model, "language_model", None)
    if lm is None:
        raise ValueError(f"{type(info.model).__name__} has no language_model; keeping positions needs one")
    return lm


class BackboneSlotHandle(SiteHandle):
    """A site that changes what the backbone hands the projector (``projector``, ``vision``).

    A forward hook on the backbone passes its output through :meth:`finish_forward` (the projector site
    reduces there; the vision site, which reduced inside the towers, collects what they kept), which calls
    :meth:`hand_on`. A benchmark that runs ``backbone.forward`` (no hooks) calls ``finish_forward`` itself.
    Subclasses add their own hooks in ``_attach_site`` / ``_remove_site`` and report
    ``reduced_num_patches_per_image()``. What a call kept: ``with reduction_call(vla) as call: ...``, then
    ``call.kept`` (:mod:`prismatic_tr.vla.scope`).
    """

    count_known = True

    def __init__(self, info: BackboneInfo, settings: Setting) -> None:
        super().__init__(info, settings)
        self.positions: PositionRemap | None = None
        self.proportional: ProportionalAttention | None = None
        # Proportional attention for merged tokens: a site whose reducer merges sets this (its language model weighs
        # each visual token by how many it stands for, :mod:`prismatic_tr.llm.sizes`).
        self.weighs_sizes = False
        # Positions live in the language model; a model without one (a feature extractor) has none to keep.
        self.keeps_positions = settings.positions == "original" and hasattr(info.model, "language_model")
        if self.keeps_positions:
            from prismatic_tr.llm.calls import rotary_modules

            rotary_modules(language_model(info))  # fails now, before anything is changed

    def reduced_num_patches_per_image(self) -> int:
        raise NotImplementedError

    def reduced_num_patches(self) -> int:
        """Patch tokens per sample the projector receives: K x the images the backbone is set to encode now
        (read from the backbone each call: OpenVLA-OFT's ``get_num_images_in_input()``)."""
        return self.reduced_num_patches_per_image() * images_in_input(self.backbone)

    def hand_on(self, kept: torch.Tensor, num_original: int, sizes: torch.Tensor | None = None) -> None:
        """After a backbone forward: the visual tokens passed on sit at ``kept`` (B, K) among ``num_original`` and
        stand for ``sizes`` (B, K) unreduced ones each (None: one each); recorded for the current top-level call
        only (outside one, nothing is recorded)."""
        record = self.current_record()
        if record is not None:
            record.hand_on(kept, num_original, sizes if self.weighs_sizes else None)

    def _positions_of_call(self) -> tuple[torch.Tensor, int] | None:
        """What the position keeping applies at a fresh language-model call: the current call's hand-off."""
        record = self.current_record()
        return record.take_positions() if record is not None else None

    def finish_forward(self, features: torch.Tensor) -> torch.Tensor:
        """The backbone's output (B, N, D) -> what the projector receives; hands the positions on."""
        raise NotImplementedError

    def _after_backbone(self, module: nn.Module, args: Any, output: Any) -> torch.Tensor:
        if not isinstance(output, torch.Tensor) or output.dim() != 3:
            raise ValueError(
                f"token reduction expects the vision backbone to return a (B, N, D) tensor, got {type(output).__name__}"
            )
        return self.finish_forward(output)

    def _attach_site(self) -> None:
        """The site's own hooks (none by default)."""

    def _remove_site(self) -> None:
        """Undo :meth:`_attach_site`."""

    def attach(self) -> Any:
        self._attach_site()

        def after_backbone(module: nn.Module, args: Any, output: Any) -> torch.Tensor:  # a closure: torch 2.2's
            return self._after_backbone(module, args, output)  # dynamo cannot call a bound method as a hook

        self._backbone_hook = self.backbone.register_forward_hook(after_backbone)
        if self.keeps_positions:
            def source() -> tuple[torch.Tensor, int] | None:  # closures, as above
                return self._positions_of_call()

            def record() -> CallRecord | None:  # in a backward pass, the call it recomputes
                return self.current_record() or (self.scope.backward if self.scope is not None else None)

            self.positions = PositionRemap(language_model(self.info), source, record)
        if self.weighs_sizes:
            def call_record() -> CallRecord | None:  # closures, as above; in a backward pass, the call it recomputes
                return self.current_record() or (self.scope.backward if self.scope is not None else None)

            self.proportional = ProportionalAttention(language_model(self.info), call_record)
        self._hold_scope()
        claim_backbone_slot(self, self.count_known)
        return self

    def remove(self) -> None:
        """Detach: hooks, position keeping, class and config go back to what they were. Safe to call twice."""
        if self.removed:
            return
        self._backbone_hook.remove()
        self._remove_site()
        if self.positions is not None:
            self.positions.remove()
            self.positions = None
        if self.proportional is not None:
            self.proportional.remove()
            self.proportional = None
        self._drop_scope()
        release_backbone_slot(self)
