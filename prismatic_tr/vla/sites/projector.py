"""The ``projector`` site: a :class:`TokenReducer` between an OpenVLA vision backbone and its projector, undoably.

The reducer runs as a forward hook on ``vision_backbone``: the backbone's output (B, n * P, D) (n images of
P patch tokens; n = 1 for OpenVLA, any n for OpenVLA-OFT) is replaced by (B, n * K, D), each image reduced on
its own (:mod:`prismatic_tr.vla.layout`), before the projector sees it, and where each kept (or pooled) token
sits among the unreduced ones is handed on (:class:`~prismatic_tr.vla.sites.base.BackboneSlotHandle`).
Nothing else in the model changes: no parameter, buffer or ``state_dict`` key is added and the model's own
``forward`` code is untouched. While attached the backbone's ``get_num_patches()`` (added if its class lacks one,
as OpenVLA's own ``PrismaticVisionBackbone`` does) and a ``num_patches`` property report K per image; after
``remove()`` the backbone object is exactly as before (class, ``__dict__``, hooks).
``vision_backbone.forward(px)`` (which bypasses hooks) still returns the unreduced features; a benchmark that
times the phases apart calls :meth:`ProjectorSiteHandle.finish_forward` on them, which hands the positions on the same way.
"""

from __future__ import annotations

import torch

from prismatic_tr.reducers import TokenReducer
from prismatic_tr.vla.grid import backbone_grid
from prismatic_tr.vla.layout import PerImageReducer, TokenLayout, token_layout
from prismatic_tr.vla.locate import BackboneInfo, max_prefix_tokens, original_num_patches
from prismatic_tr.vla.settings import Setting
from prismatic_tr.vla.sites.base import BackboneSlotHandle, language_model


class ProjectorSiteHandle(BackboneSlotHandle):
    """A live projector-site reduction on one VLA (see the module docstring).

    Counts, per sample: every image is reduced on its own from P to K patch tokens.
    ``reduced_num_patches_per_image()`` is K, which the backbone's ``get_num_patches()`` (and a native backbone's
    ``num_patches``) report while attached, as they report P (per image) without reduction;
    ``reduced_num_patches()`` is K times the images per sample, the patch tokens the projector receives.
    """

    def __init__(self, info: BackboneInfo, settings: Setting) -> None:
        super().__init__(info, settings)
        # Patch tokens of one image without reduction (None: the backbone does not say; one image assumed).
        self.patches_per_image = original_num_patches(info.backbone)
        self.count_known = self.patches_per_image is not None
        self.max_prefix = max_prefix_tokens(info.backbone)
        grid = backbone_grid(info.backbone) if settings.method == "spatial_pool" else None
        if grid is not None and grid[0] * grid[1] != self.patches_per_image:
            grid = None
        self.reducer = TokenReducer(settings.reducer_config(grid_size=grid))
        # a merging method's tokens are weighed by their sizes in the language model, where there is one
        self.weighs_sizes = self.reducer.strategy.merges and hasattr(info.model, "language_model")
        if self.weighs_sizes:
            language_model(info)  # fails now, before anything is changed
        if self.patches_per_image is not None:
            self.reducer.output_tokens(self.patches_per_image)  # a grid that does not fit fails here, not mid-forward
        self._by_prefix: dict[int, TokenReducer] = {0: self.reducer}
        self._by_layout: dict[TokenLayout, PerImageReducer] = {}

    def reduced_num_patches_per_image(self) -> int:
        """K: patch tokens each image keeps (what ``get_num_patches()`` reports while attached)."""
        if self.patches_per_image is None:
            raise ValueError("the backbone does not report its patch count, so the reduced count is unknown")
        return self.reducer.output_tokens(self.patches_per_image)

    def layout(self, num_tokens: int) -> TokenLayout:
        """How a backbone output of ``num_tokens`` tokens per sample splits into prefix and images."""
        return token_layout(num_tokens, self.patches_per_image, self.max_prefix, self.settings.keep_cls_token)

    def reducer_for(self, num_tokens: int) -> PerImageReducer:
        """The module that reduces a backbone output of ``num_tokens`` tokens per sample, image by image.

        ``ValueError`` when ``num_tokens`` does not split into whole images (see :func:`token_layout`).
        """
        lay = self.layout(num_tokens)
        if lay not in self._by_layout:
            if lay.prefix not in self._by_prefix:  # prefix > 0: one image of P patches after the prefix
                cfg = self.settings.reducer_config(num_prefix_tokens=lay.prefix, grid_size=self.reducer.cfg.grid_size)
                self._by_prefix[lay.prefix] = TokenReducer(cfg)
            self._by_layout[lay] = PerImageReducer(self._by_prefix[lay.prefix], lay)
        return self._by_layout[lay]

    @property
    def cut(self) -> str:
        return "after the backbone"

    def reseed(self) -> None:
        """Restart the ``random`` strategy's draws (every layout's reducer) from the configured seed."""
        for reducer in self._by_prefix.values():
            reducer.reseed()

    def finish_forward(self, features: torch.Tensor) -> torch.Tensor:
        """Backbone features (B, N, D) -> reduced (B, N', D), the kept tokens' positions handed on."""
        out, kept, sizes = self.reducer_for(features.shape[1]).reduce(features)
        self.hand_on(kept, features.shape[1], sizes)
        return out

    def __repr__(self) -> str:
        state = "removed" if self.removed else "attached"
        return f"ProjectorSiteHandle({self.reducer.extra_repr()}, positions={self.settings.positions}, {state})"


# v0.2 name of the projector site's handle
ReductionHandle = ProjectorSiteHandle
