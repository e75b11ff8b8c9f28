"""``diverse_merge``: keep the tokens ``diverse`` keeps, each the mean of the tokens nearest to it.

``diverse`` drops N - K tokens outright. Here every dropped token is folded into the kept token nearest to it in
cosine similarity (each kept token is its own nearest), and a kept token becomes the mean of the tokens so
assigned to it: the K tokens then stand for all N, a region of look-alike background as one token that carries
the region's mean feature rather than one of its patches. The idea of merging similar tokens instead of dropping
them is token merging's (ToMe, Bolya et al., ICLR 2023); ToMe merges by bipartite matching inside a ViT's blocks,
this keeps DivPrune's max-min cover and only averages into it. Written here from those descriptions, no code taken.

Each kept token's group size goes with it (``ReductionOutput.sizes``): the language model then weighs a token
that stands for n patches n times in attention (ToMe's proportional attention, :mod:`prismatic_tr.llm.sizes`),
so that a merged region draws the attention its patches drew together.

Each output token sits at its kept patch's position (the cover's representative), not at the mean of the patches
it averages: those can lie anywhere in the image. Static shapes (one (B, N, K) similarity, two scatter-adds), no
host sync.
"""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput
from prismatic_tr.reducers.registry import register_strategy
from prismatic_tr.reducers.strategies.diverse import max_min_order, score_diverse
from prismatic_tr.reducers.strategies.selection import count_by_ratio
from prismatic_tr.reducers.tensor_ops import gather_rows, group_means, top_indices


def nearest_owner(patches: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """(B, N, D) tokens, (B, K) kept indices -> (B, N) int64 in 0 .. K - 1: the kept token nearest to each token
    (cosine similarity; ties to the lower kept index), each kept token its own."""
    x = torch.nn.functional.normalize(patches.float(), dim=-1)
    sim = torch.bmm(x, gather_rows(x, idx).transpose(1, 2))         # (B, N, K)
    own = torch.arange(idx.shape[1], device=idx.device).expand_as(idx)
    return sim.argmax(dim=-1).scatter(1, idx, own)  # a kept token is its own, also where another looks the same


def merge_into(patches: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N, D) tokens, (B, K) kept indices -> (B, K, D) each kept token the mean of the tokens whose nearest kept
    token (:func:`nearest_owner`) it is, itself included, in ``patches``' dtype; and (B, K) how many tokens each
    mean is of (>= 1, summing to N; float32, float64 for float64 tokens)."""
    return group_means(patches, nearest_owner(patches, idx), idx.shape[1])


@register_strategy("diverse_merge", count=count_by_ratio, score=score_diverse, merges=True)
def reduce_diverse_merge(
    patches: torch.Tensor, cfg: ReducerConfig, rng: torch.Tensor | torch.Generator | None = None
) -> ReductionOutput:
    """(B, N, D) -> (B, K, D): ``diverse``'s K tokens (:func:`max_min_order`), in spatial order, each merged with
    the dropped tokens nearest to it (:func:`merge_into`); ``indices`` the kept patches, which are also the output
    tokens' positions; ``sizes`` the group sizes. Its ``score`` is ``diverse``'s: the representatives, which the
    ``vision`` site picks inside the towers and merges there (:mod:`prismatic_tr.vit.shared`)."""
    k = count_by_ratio(patches.shape[1], cfg)
    idx = top_indices(max_min_order(patches, k), k)
    tokens, sizes = merge_into(patches, idx)
    return ReductionOutput(tokens, idx, sizes=sizes)
