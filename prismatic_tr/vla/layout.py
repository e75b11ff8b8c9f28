"""How a vision backbone's output is laid out, and reducing it one image at a time.

OpenVLA's backbones return the patch tokens of one image, ``(B, P, D)``. OpenVLA-OFT's backbone encodes
``n`` images per sample and concatenates their patch tokens along the token axis, ``(B, n * P, D)``, image
after image; OFT then counts the visual tokens as ``get_num_patches() * get_num_images_in_input()``. Reducing
every image on its own to the same ``K`` keeps that product exact for any ratio: the projector receives
``n * K`` tokens, image ``i``'s kept tokens in positions ``[i * K, (i + 1) * K)``, in their original order.

The image count is read from each output's shape (``N // P``), never cached, so changing the number of
images after attaching a reduction stays exact. Everything here is a function of shapes only: the forward
path is a view-reshape, one reducer call and a view-reshape back (no host syncs, static shapes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from prismatic_tr.reducers import TokenReducer
from prismatic_tr.reducers.config import ReductionOutput


@dataclass(frozen=True)
class TokenLayout:
    """The tokens of one backbone output per sample: ``prefix`` leading tokens, then ``num_images`` x ``patches``.

    prefix: leading tokens (CLS, registers) passed through unreduced; only with a single image.
    num_images: images whose patch tokens follow each other (OpenVLA-OFT: ``get_num_images_in_input()``).
    patches: patch tokens of each image.
    """

    prefix: int
    num_images: int
    patches: int

    @property
    def num_tokens(self) -> int:
        return self.prefix + self.num_images * self.patches


# follows OpenVLA-OFT 213c5ff8 prismatic/extern/hf/modeling_prismatic.py (MIT, see NOTICE): images' patch tokens one
# after another, counted as get_num_patches() * get_num_images_in_input(), so OFT's slicing stays right.
def token_layout(
    num_tokens: int, patches_per_image: int | None, max_prefix: int, keep_prefix: bool
) -> TokenLayout:
    """The layout of a backbone output of ``num_tokens`` tokens per sample.

    Args:
        num_tokens: N, the backbone output's token count (``output.shape[1]``).
        patches_per_image: P, the backbone's unreduced patch count per image; None when it does not report one
            (the output is then taken as one image).
        max_prefix: the most prefix tokens (CLS, registers) the backbone's towers can emit (``num_prefix_tokens``).
        keep_prefix: protect prefix tokens; when False they are reduced along with the patches.

    A multiple of P is that many images (no prefix). Otherwise ``P + r`` with ``0 < r <= max_prefix`` is one
    image after ``r`` prefix tokens. Any other count is a ``ValueError``: it cannot be split into images.
    """
    if patches_per_image is None:
        return TokenLayout(0, 1, num_tokens)
    num_images, rest = divmod(num_tokens, patches_per_image)
    if num_images >= 1 and rest == 0:
        return TokenLayout(0, num_images, patches_per_image)
    extra = num_tokens - patches_per_image
    if 0 < extra <= max_prefix:
        return TokenLayout(extra, 1, patches_per_image) if keep_prefix else TokenLayout(0, 1, num_tokens)
    prefix_note = f" or one image after 1 to {max_prefix} prefix tokens" if max_prefix else ""
    raise ValueError(
        f"the vision backbone returned {num_tokens} tokens per sample, which is neither a whole number of images "
        f"of {patches_per_image} patch tokens{prefix_note}; token reduction cannot tell the images apart"
    )


class PerImageReducer(nn.Module):
    """Apply a :class:`TokenReducer` to each image of a ``(B, n * P, D)`` output on its own.

    ``forward``: (B, P_pre + n * P, D) -> (B, P_pre + n * K, D) with K = ``reducer.output_tokens(P)``; the
    reducer's ``num_prefix_tokens`` must equal the layout's prefix (which is 0 whenever n > 1). Images stay in
    order and image i's tokens stay in their own block; ``random`` draws every image independently.
    :meth:`reduce` also returns where each output token sits among the input tokens; nothing is stored.
    """

    def __init__(self, reducer: TokenReducer, layout: TokenLayout) -> None:
        super().__init__()
        if reducer.cfg.num_prefix_tokens != layout.prefix or (layout.prefix and layout.num_images != 1):
            raise ValueError(
                f"reducer with num_prefix_tokens={reducer.cfg.num_prefix_tokens} does not fit {layout}; "
                f"prefix tokens are supported with a single image only"
            )
        self.reducer = reducer
        self.layout = layout

    def output_tokens(self, num_tokens: int) -> int:
        """Tokens out for a ``num_tokens`` input of this layout (prefix included)."""
        if num_tokens != self.layout.num_tokens:
            raise ValueError(f"this reducer is built for {self.layout.num_tokens} tokens per sample, got {num_tokens}")
        lay = self.layout
        kept_per_image = self.reducer.output_tokens(lay.prefix + lay.patches) - lay.prefix
        return lay.prefix + lay.num_images * kept_per_image

    def reseed(self, seed: int | None = None) -> None:
        """Restart the ``random`` strategy's draws (see :meth:`TokenReducer.reseed`)."""
        self.reducer.reseed(seed)

    def kept_positions(self, out: ReductionOutput) -> torch.Tensor:
        """(B, N') where each token of the output ``out`` (of the reducer on (B * n, P) rows) sits among the
        layout's ``num_tokens`` input tokens: prefix tokens at their own index, image ``i``'s kept patch ``j`` at
        ``prefix + i * P + j``; int64, or float32 when the reducer merges tokens (a pooled window's position)."""
        lay = self.layout
        within = out.positions if out.positions is not None else out.indices  # (B * n, K)
        b = within.shape[0] // lay.num_images
        offsets = torch.arange(lay.num_images, device=within.device)[:, None] * lay.patches + lay.prefix
        kept = (within.reshape(b, lay.num_images, -1) + offsets).reshape(b, -1)
        if not lay.prefix:
            return kept
        prefix = torch.arange(lay.prefix, device=kept.device, dtype=kept.dtype).expand(b, -1)
        return torch.cat([prefix, kept], dim=1)

    def token_sizes(self, out: ReductionOutput) -> torch.Tensor | None:
        """(B, N') how many input tokens each output token of ``out`` stands for (prefix tokens 1), float32, when
        the reducer merges (``out.sizes``); None when each stands for one."""
        if out.sizes is None:
            return None
        lay = self.layout
        sizes = out.sizes.reshape(out.sizes.shape[0] // lay.num_images, -1)
        if not lay.prefix:
            return sizes
        return torch.cat([sizes.new_ones(sizes.shape[0], lay.prefix), sizes], dim=1)

    def reduce(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(B, N, D) -> the reduced tokens (B, N', D), where each sits among the N (B, N') (see
        :meth:`kept_positions`) and how many each stands for (B, N') or None (:meth:`token_sizes`)."""
        if x.dim() != 3 or x.shape[1] != self.layout.num_tokens:
            raise ValueError(
                f"expected features of shape (B, {self.layout.num_tokens}, D) for {self.layout}, got {tuple(x.shape)}"
            )
        n = self.layout.num_images
        b, _, d = x.shape
        out = self.reducer.reduce(x if n == 1 else x.reshape(b * n, self.layout.patches, d))
        tokens = out.tokens if n == 1 else out.tokens.reshape(b, -1, d)
        return tokens, self.kept_positions(out), self.token_sizes(out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, D) -> (B, N', D): each image reduced by ``reducer``, results concatenated in image order."""
        return self.reduce(x)[0]

    def extra_repr(self) -> str:
        lay = self.layout
        return f"prefix={lay.prefix}, images={lay.num_images}, patches_per_image={lay.patches}"
