"""The ``vision`` site: one patch selection inside both vision towers, undoably.

:func:`prismatic_tr.vit.shared.apply_shared_selection` on the backbone's towers (``featurizer`` scores,
``fused_featurizer`` follows), so the blocks after ``depth_fraction`` of each tower and the projector run on the
kept patches. OpenVLA-OFT's backbone runs the towers on each image (the native one as one batch of n * B rows):
each image is selected on its own, to the same K. After the backbone's forward the patches each image kept are handed on as positions among the
unreduced ones (image ``m``'s patch ``i`` at ``m * P + i``). The backbone reports the kept count per image
(``get_num_patches()``), as with the projector site, in whose slot it sits. No parameter or ``state_dict`` key
added to the model; ``remove()`` restores it exactly. A merging method (``diverse_merge``) merges inside the towers
(:mod:`prismatic_tr.vit.shared`) and hands each token's group size on with the positions, so that the language model
weighs it as its patches (:mod:`prismatic_tr.llm.sizes`). Method ``"learned"``: the handle owns the scorer
(:class:`prismatic_tr.reducers.learned.CoverScorer`, built from ``settings.scorer``); ``scorer_parameters()`` are
what a fine-tuning run trains with the policy, and :meth:`VisionSiteHandle.snapshot` the settings with the scorer
as trained, which a checkpoint saves.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from prismatic_tr.calls import CallRecord, Records
from prismatic_tr.reducers.config import num_kept
from prismatic_tr.reducers.learned import LEARNED, CoverScorer
from prismatic_tr.vit.shared import (
    SharedSelectionHandle,
    apply_shared_selection,
    check_towers,
    merges,
    reduction_block,
    tower_width,
)
from prismatic_tr.vla.locate import BackboneInfo, backbone_towers
from prismatic_tr.vla.settings import Setting
from prismatic_tr.vla.sites.base import BackboneSlotHandle, language_model

MAX_IMAGES = 16  # images one backbone forward may encode per sample (OpenVLA-OFT uses up to 3)


class VisionSiteHandle(BackboneSlotHandle):
    """Token selection inside the vision towers (see the module docstring)."""

    def __init__(self, info: BackboneInfo, settings: Setting) -> None:
        super().__init__(info, settings)
        self.towers = backbone_towers(info.backbone, "the vision site")
        check_towers(self.towers)  # fails now, before anything is changed
        self.scorer = CoverScorer(tower_width(self.towers[0]), settings.scorer) if settings.method == LEARNED else None
        # a merging method's tokens are weighed by their sizes in the towers after the cut and in the language model
        self.weighs_sizes = merges(settings.method) and hasattr(info.model, "language_model")
        if self.weighs_sizes:
            language_model(info)  # fails now, before anything is changed
        if self.scorer is not None:
            self.scorer.to(next(self.towers[0].parameters()).device)
        self.selection: SharedSelectionHandle | None = None
        # the choices of the backbone forward in flight (one per image) go into the record of the call in flight
        # (``CallRecord.images``): the VLA's top-level call, else one per backbone forward
        def outer() -> CallRecord | None:  # a closure: torch 2.2's dynamo cannot call a stored bound method
            return self.current_record()

        self.records = Records(outer)
        self._start_hook = None

    def scorer_parameters(self) -> list[nn.Parameter]:
        """The learned scorer's parameters (none for every other method): trained beside the policy."""
        return list(self.scorer.parameters()) if self.scorer is not None else []

    def snapshot(self) -> Setting:
        """The settings as they stand now: with method "learned", ``scorer`` holds the scorer's current values."""
        if self.scorer is None:
            return self.settings
        return dataclasses.replace(self.settings, scorer=self.scorer.values())

    @property
    def patches_per_image(self) -> int:
        return int(self.towers[0].patch_embed.num_patches)

    def reduced_num_patches_per_image(self) -> int:
        return num_kept(self.patches_per_image, self.settings.keep_ratio)

    @property
    def cut(self) -> str:
        """e.g. "towers after 6/23, 7/26 blocks": block ``j`` of the blocks each tower runs (OpenVLA's towers run
        all but their last block)."""
        runs = [len(t.blocks) - 1 for t in self.towers]
        done = [reduction_block(len(t.blocks), self.settings.depth_fraction) + 1 for t in self.towers]
        return "towers after " + ", ".join(f"{d}/{r}" for d, r in zip(done, runs, strict=True)) + " blocks"

    def finish_forward(self, features: torch.Tensor) -> torch.Tensor:
        """The towers already reduced ``features`` (B, n * K, D): hand on where the n images' kept patches sit."""
        k = self.reduced_num_patches_per_image()
        b, images = features.shape[0], features.shape[1] // k
        # the towers ran once per image (B rows each) or once on all images as n * B rows, image-major
        record = self.records.current()
        done = record.images if record is not None else []
        rows = torch.cat([c for c, _ in done], dim=0) if done else features.new_zeros(0, k, dtype=torch.long)
        chosen = list(rows[rows.shape[0] - images * b :].split(b)) if rows.shape[0] >= images * b else []
        sizes = None
        if self.weighs_sizes and done and all(s is not None for _, s in done) and len(chosen) == images:
            weights = torch.cat([s for _, s in done], dim=0)[rows.shape[0] - images * b :]
            sizes = torch.cat(weights.split(b), dim=1)
        if record is not None:
            record.images = []
        self.records.end()
        if len(chosen) != images or features.shape[1] != images * k:
            raise ValueError(f"the vision backbone returned {features.shape[1]} tokens per sample but its towers "
                             f"chose {rows.shape[0] // max(b, 1)} image(s) of {k} patches in this forward")
        p = self.patches_per_image
        self.hand_on(torch.cat([idx + m * p for m, idx in enumerate(chosen)], dim=1), images * p, sizes)
        return features

    def _attach_site(self) -> None:
        s = self.settings

        def on_select(indices: torch.Tensor, sizes: torch.Tensor | None) -> None:  # a closure: torch 2.2's dynamo
            record = self.records.current()              # cannot call a bound list.append handed over as a hook argument
            if record is None:  # the towers run by hand (backbone.forward), outside any call
                record = self.records.begin()
            if len(record.images) >= MAX_IMAGES:  # towers run by hand, never through the backbone: bounded
                del record.images[0]
            record.images.append((indices, sizes))

        def start(module: nn.Module, args: tuple) -> None:  # nothing of an earlier (failed) forward is read
            self.records.begin().images = []

        def record() -> CallRecord | None:  # a closure, as above
            return self.records.current()

        self._start_hook = self.backbone.register_forward_pre_hook(start)

        self.selection = apply_shared_selection(self.towers, s.depth_fraction, s.keep_ratio, s.method,
                                                on_select=on_select, seed=s.seed, scorer=self.scorer, record=record)

    def reseed(self) -> None:
        """Restart a random selection's draws from the settings' seed."""
        if self.selection is not None:
            self.selection.reseed()

    def _remove_site(self) -> None:
        self.selection.remove()
        self._start_hook.remove()
        self.records.end()
