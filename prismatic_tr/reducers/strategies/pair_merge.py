"""``pair_merge``: K tokens, each the mean of a group grown by merging the most alike pairs first.

`diverse_merge` keeps DivPrune's max-min cover (K tokens far apart) and folds every other patch into its nearest
kept one, so a patch unlike any kept one is still averaged into one. Here the groups are grown the other way, as
token merging does inside a ViT (ToMe, Bolya et al., ICLR 2023: bipartite soft matching; the idea only, written here
from the paper's description, no code taken): in rounds, the current tokens are split alternately (in spatial order)
into sets A and B, each A token finds its most alike B token (cosine similarity of the groups' means), and the ``r``
A tokens whose best match is closest merge into it; the rest stay. Rounds go on until K tokens are left, each
merging at most half of A, so the most alike pairs (look-alike background) merge first and a patch like no other
is merged last. The representative of a group (its output position) is the patch its B token started from.

Each output token's group size goes with it (``ReductionOutput.sizes``), and the language model weighs it so in
attention, as `diverse_merge`'s (:mod:`prismatic_tr.llm.sizes`). At the ``vision`` site the groups are made on the
scoring tower's tokens after the cut block and applied to every tower (:mod:`prismatic_tr.vit.shared`, through the
strategy's ``groups``). Chosen on MetaWorld's validation episodes at keep 0.5, where the cover's groups lose reach's
millimetres (issue 48; ``benchmarks/results/metaworld/shipped/validation_pair_merge/``).

Static shapes (the rounds and each round's ``r`` follow from N and K alone), no host sync: per round one
(B, |A|, |B|) similarity, a top-k and scatter-adds.
"""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput
from prismatic_tr.reducers.registry import register_strategy
from prismatic_tr.reducers.strategies.selection import count_by_ratio
from prismatic_tr.reducers.tensor_ops import group_means, top_indices


def pair_rounds(n: int, k: int) -> list[int]:
    """The tokens merged in each round to go from ``n`` to ``k`` (1 <= k <= n): each round at most half of set A
    (``ceil(current / 2)`` tokens), at least one."""
    if not 1 <= k <= n:
        raise ValueError(f"pair merging keeps k={k} of n={n} tokens; k must be in 1 .. n")
    rounds, current = [], n
    while current > k:
        r = min(current - k, max(1, (current + 1) // 2 // 2))
        rounds.append(r)
        current -= r
    return rounds


def pair_owner(patches: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N, D) patches -> (B, K) representatives (patch indices, ascending) and (B, N) the group of each patch
    (0 .. K - 1, in the representatives' order; every representative in its own group), by the rounds of
    :func:`pair_rounds`."""
    b, n, _ = patches.shape
    device = patches.device
    owner = torch.arange(n, device=device).expand(b, n)   # each patch's current token (slot)
    rep = torch.arange(n, device=device).expand(b, n)     # each current token's representative patch, ascending
    current = n
    for r in pair_rounds(n, k):
        means, _ = group_means(patches.float(), owner, current)
        x = torch.nn.functional.normalize(means, dim=-1)
        a, bb = x[:, 0::2], x[:, 1::2]                                # (B, ceil(c/2), D), (B, floor(c/2), D)
        best, match = torch.bmm(a, bb.transpose(1, 2)).max(dim=-1)   # each A token's most alike B token
        merged = best.topk(r, dim=1).indices                         # (B, r) A tokens merged this round
        slots = torch.arange(current, device=device).expand(b, current)
        target = slots.clone()                                       # where each current token goes (old slots)
        target[:, 0::2] = target[:, 0::2].scatter(1, merged, (2 * match + 1).gather(1, merged))
        keep = torch.ones(b, current, device=device).scatter(1, 2 * merged, 0.0)
        new_slot = keep.cumsum(dim=1).long() - 1                     # a survivor's slot among the survivors
        owner = new_slot.gather(1, target.gather(1, owner))
        rep = rep.gather(1, top_indices(keep, current - r))          # the survivors, still ascending
        current -= r
    return rep, owner


@register_strategy("pair_merge", count=count_by_ratio, merges=True, groups=pair_owner)
def reduce_pair_merge(
    patches: torch.Tensor, cfg: ReducerConfig, rng: torch.Tensor | torch.Generator | None = None
) -> ReductionOutput:
    """(B, N, D) -> (B, K, D): each of the K groups of :func:`pair_owner` as its mean (in ``patches``' dtype);
    ``indices`` the representatives, which are also the output tokens' positions; ``sizes`` the group sizes."""
    k = count_by_ratio(patches.shape[1], cfg)
    idx, owner = pair_owner(patches, k)
    tokens, sizes = group_means(patches, owner, k)
    return ReductionOutput(tokens, idx, sizes=sizes)
