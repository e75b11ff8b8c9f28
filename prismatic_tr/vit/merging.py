"""Token Merging: bipartite soft matching, size-weighted merging, proportional attention, r schedules.

Written from the description in Bolya et al., "Token Merging: Your ViT But Faster" (ICLR 2023); no code of
the authors' repository is included (see NOTICE). Pure tensor code: no model access, static shapes, no host
syncs (the number merged is a Python int from shapes and config).

Sets. A sequence of N tokens starts with P prefix tokens (CLS, distillation token, registers) that are never
merged. The other tokens are split by their position n in the whole sequence (prefix included): set A holds
the even positions n >= P, set B the odd ones. Every A token proposes one edge, to the B token whose metric
(the block's keys averaged over heads) is most similar by cosine; the r strongest edges are merged, each A
token into its B partner. r is clamped to (N - P) // 2, which never exceeds the size of A.

Layout after merging r > 0 tokens (N - r tokens)::

    [ prefix (P, original order) | A tokens not merged (ascending position) | B tokens (ascending position) ]

With r = 0 nothing moves. Ties go to the lower position: an A token's partner is the first of its equally
similar B tokens, and of equally strong edges the one from the lower-positioned A token is merged first.

Sizes. Every token carries a size s (patches it stands for; 1 before any merge), kept as float32 (exact
counts up to 2**24). A B token that received sources becomes the size-weighted mean of its group,
sum(s_i x_i) / sum(s_i), and its size sum(s_i); every other token is copied unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["TokenMatching", "match_tokens", "merge_schedule", "proportional_attention_bias", "unit_sizes"]


def unit_sizes(x: torch.Tensor) -> torch.Tensor:
    """Sizes before any merge: x (B, N, C) -> ones (B, N, 1), float32, on x's device."""
    return torch.ones(x.shape[0], x.shape[1], 1, dtype=torch.float32, device=x.device)


def proportional_attention_bias(size: torch.Tensor) -> torch.Tensor:
    """Key bias of proportional attention: sizes (B, N, 1) -> log(size) laid out as (B, 1, 1, N).

    Added to the attention logits (broadcast over heads and queries), a token of size s weighs in the
    softmax like s copies of itself.
    """
    batch, tokens = size.shape[0], size.shape[1]
    return torch.log(size.reshape(batch, 1, 1, tokens))


def _set_starts(num_prefix: int) -> tuple[int, int]:
    """First position of set A (even) and of set B (odd) at or after ``num_prefix``."""
    odd = num_prefix % 2
    return num_prefix + odd, num_prefix + 1 - odd


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, M, C), index (B, K) into M -> x's rows (B, K, C)."""
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


@dataclass(frozen=True)
class TokenMatching:
    """One matching of a sequence of ``num_tokens`` tokens, reusable for any per-token tensor of it.

    ``kept`` (B, |A| - r): indices into set A of the A tokens that stay, ascending.
    ``sources`` (B, r): indices into set A of the A tokens merged away, ascending.
    ``targets`` (B, r): index into set B of each source's partner.
    The three are None when nothing is merged (r = 0); then both merges return their input.
    """

    num_tokens: int
    num_prefix: int
    kept: torch.Tensor | None = None
    sources: torch.Tensor | None = None
    targets: torch.Tensor | None = None

    @property
    def num_merged(self) -> int:
        """r: tokens removed by this matching (a Python int, from shapes)."""
        return 0 if self.sources is None else self.sources.shape[1]

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, N, C) -> prefix (B, P, C), set A (B, |A|, C), set B (B, |B|, C); views."""
        if x.shape[1] != self.num_tokens:
            raise ValueError(f"tensor has {x.shape[1]} tokens; this matching was made for {self.num_tokens}")
        start_a, start_b = _set_starts(self.num_prefix)
        return x[:, : self.num_prefix], x[:, start_a::2], x[:, start_b::2]

    def _absorb(self, set_b: torch.Tensor, incoming: torch.Tensor) -> torch.Tensor:
        """set_b (B, |B|, C) plus each source's row of ``incoming`` (B, r, C) added to its target, in
        ascending source order."""
        assert self.targets is not None
        index = self.targets.unsqueeze(-1).expand(-1, -1, set_b.shape[-1])
        return set_b.scatter_add(1, index, incoming)

    def _join(self, prefix: torch.Tensor, set_a: torch.Tensor, new_b: torch.Tensor) -> torch.Tensor:
        """The merged layout (module doc): (B, N - r, C)."""
        assert self.kept is not None
        return torch.cat([prefix, _rows(set_a, self.kept), new_b], dim=1)

    def merge_sum(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, N, C) -> (B, N - r, C): each B token plus the rows of its sources; others unchanged.

        For quantities that add up when tokens merge (sizes, masses). Added in ``promote_types(x.dtype,
        float32)`` from the B token's own row in ascending source order, then cast to x's dtype.
        """
        if self.sources is None:
            return x
        prefix, set_a, set_b = self._split(x)
        acc = torch.promote_types(x.dtype, torch.float32)
        new_b = self._absorb(set_b.to(acc), _rows(set_a, self.sources).to(acc)).to(x.dtype)
        return self._join(prefix, set_a, new_b)

    def merge_mean(self, x: torch.Tensor, size: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Size-weighted merge: x (B, N, C), size (B, N, 1) or None (all 1) -> x (B, N - r, C), size (B, N - r, 1).

        A B token that received sources becomes sum(s_i x_i) / sum(s_i) over its group, accumulated in
        ``promote_types(x.dtype, size.dtype)`` (at least float32) from the B token's own term in ascending
        source order, then cast to x's dtype; every other row is copied. Sizes are summed in their dtype.
        """
        size = unit_sizes(x) if size is None else size
        if self.sources is None or self.targets is None:
            return x, size
        acc = torch.promote_types(x.dtype, size.dtype)
        prefix, set_a, set_b = self._split(x)
        size_prefix, size_a, size_b = self._split(size)
        src_size = _rows(size_a, self.sources)
        mass = self._absorb(set_b.to(acc) * size_b, _rows(set_a, self.sources).to(acc) * src_size)
        new_size = self._absorb(size_b, src_size)
        received = torch.zeros_like(size_b, dtype=torch.bool).scatter(1, self.targets.unsqueeze(-1), True)
        new_b = torch.where(received, (mass / new_size).to(x.dtype), set_b)
        return self._join(prefix, set_a, new_b), self._join(size_prefix, size_a, new_size)


# follows Token Merging (Bolya et al., ICLR 2023) as the paper describes it; no code of facebookresearch/ToMe
# (CC BY-NC 4.0) is included, see NOTICE.
def match_tokens(metric: torch.Tensor, r: int, num_prefix: int) -> TokenMatching:
    """Bipartite soft matching (module doc): metric (B, N, C') -> the matching that merges r tokens.

    ``metric`` is what similarity is measured on (ToMe: the block's keys averaged over heads); it is
    compared in float32 whatever its dtype. ``r`` is clamped to [0, (N - P) // 2]; read the number actually
    merged from ``num_merged``. ValueError for ``num_prefix`` outside 0..N.
    """
    num_tokens = metric.shape[1]
    if not 0 <= num_prefix <= num_tokens:
        raise ValueError(f"num_prefix={num_prefix} for {num_tokens} tokens; allowed 0..{num_tokens}")
    r = max(0, min(int(r), (num_tokens - num_prefix) // 2))
    if r == 0:
        return TokenMatching(num_tokens, num_prefix)
    start_a, start_b = _set_starts(num_prefix)
    with torch.no_grad():
        unit = F.normalize(metric.float(), dim=-1)
        similarity = unit[:, start_a::2] @ unit[:, start_b::2].transpose(1, 2)  # (B, |A|, |B|)
        edge, partner = similarity.max(dim=-1)  # first of equal maxima: lowest B index
        strongest = torch.argsort(edge, dim=-1, descending=True, stable=True)  # ties: lower A index first
        sources = strongest[:, :r].sort(dim=-1).values
        kept = strongest[:, r:].sort(dim=-1).values
        targets = partner.gather(1, sources)
    return TokenMatching(num_tokens, num_prefix, kept=kept, sources=sources, targets=targets)


# follows ToMe's public (r, inflection) argument form (facebookresearch/ToMe, see NOTICE): the shape of the
# argument only; the schedule is defined and written here.
def merge_schedule(r: int | list[int] | tuple[int, float], depth: int) -> list[int]:
    """Tokens to merge in each of ``depth`` blocks.

    * int r: r in every block.
    * list: one value per block from the first; missing blocks merge 0. ValueError if longer than depth.
    * (r, inflection), inflection in [-1, 1]: r changes linearly from r * (1 - inflection) in the first
      block to r * (1 + inflection) in the last, each value rounded down (a 1e-6 guard absorbs float noise),
      so the total stays about depth * r: inflection 0 is constant r, -1 starts at 2r and falls to 0,
      +1 rises from 0 to 2r. A single block merges r.
    """
    if isinstance(r, tuple):
        base, inflection = r
        if depth == 1:
            return [int(base)]
        first, last = base * (1.0 - inflection), base * (1.0 + inflection)
        return [max(0, int(first + (last - first) * i / (depth - 1) + 1e-6)) for i in range(depth)]
    if isinstance(r, list):
        if len(r) > depth:
            raise ValueError(f"r schedule has {len(r)} entries for a model of depth {depth}; at most {depth}")
        return [int(v) for v in r] + [0] * (depth - len(r))
    return [int(r)] * depth
