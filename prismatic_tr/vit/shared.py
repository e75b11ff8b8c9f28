"""One patch selection shared by the timm towers of a fused backbone, made inside the towers.

OpenVLA's fused backbone runs DINOv2 and SigLIP on the same image and concatenates their patch features
position by position, so a reduction inside the towers must keep the same patch positions in both.
``apply_shared_selection(towers, depth_fraction, keep_ratio)`` registers a forward hook on one block of each
tower, at the same fraction of its depth:

* the first tower (the scorer, run first by OpenVLA's backbone) scores its patch tokens after that block,
  keeps the ``num_kept(N, keep_ratio)`` best (prefix tokens, e.g. DINOv2's CLS and registers, always stay first)
  and remembers their indices;
* every other tower gathers the same patch indices after its own block.

The blocks after it run on the kept tokens only; the towers' outputs (patch tokens of block ``depth - 2``,
prefix dropped) are then (B, K, D_i) and concatenate as before. Built-in scores: ``"attention"`` (EViT): the attention
the next block's query row pays each patch (the CLS row, or the mean query without a CLS token, as in
:mod:`prismatic_tr.vit.topk`); ``"norm"``: the L2 norm of the patch features. Static shapes, no host sync; the
hooks change no parameter and are removed exactly. Any registered selection strategy of
:mod:`prismatic_tr.reducers` (``saliency``, ``diverse``, ``random``, ...) scores too, on the patch tokens that
block put out (prefix dropped), and so does ``"learned"`` (:mod:`prismatic_tr.reducers.learned`: the ``diverse``
cover weighed by a trained scorer, whose straight-through gate multiplies the kept tokens by exactly 1 while
gradients are on, so that the loss reaches the scorer).

A merging strategy (``diverse_merge``) keeps the same K patches as representatives and folds every other patch into
its nearest one (:func:`~prismatic_tr.reducers.strategies.diverse_merge.nearest_owner`, on the scoring tower's
tokens): each kept token becomes the mean of its group, in every tower with the scoring tower's groups. The blocks
after the cut then weigh a token that stands for n patches as n copies in their attention (``+ log n`` on its key
column, ToMe's proportional attention; prefix tokens stand for one): their attention modules get an instance-level
``forward`` (:class:`_WeightedAttention`, removed exactly) that reads the pass's group sizes from the call's record
(``CallRecord.towers``).

A strategy that makes its own groups (``pair_merge``, ``Strategy.groups``: the most alike pairs merged first) makes
them on the scoring tower's tokens after the cut block, its representatives the kept positions, and every tower is
merged by those groups as above.

``diverse_merge_keys`` (:data:`KEYED_MERGE`, this site only) merges as ``diverse_merge`` does, but picks the cover
on the keys the next block's attention computes from the cut block's output (all heads side by side,
:func:`next_block_keys`) instead of on the tokens themselves; the groups are still made on the tokens. Token
merging (ToMe, Bolya et al., ICLR 2023) found a block's keys a better measure of which tokens are alike than the
tokens; here they choose the representatives, written from that description, no code taken. Measured (issue 48):
on the MetaWorld policy's recorded states, choosing the cover on keys brought the reduced action
chunk nearer the unreduced one than choosing it on tokens
(``benchmarks/metaworld_action_gap.py``, ``benchmarks/results/metaworld/shipped/action_gap/``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from prismatic_tr.calls import CallRecord, Records, RecordSource, TowersPass
from prismatic_tr.reducers.config import ReducerConfig, check_fraction, num_kept
from prismatic_tr.reducers.learned import LEARNED, CoverScorer, straight_through_gate
from prismatic_tr.reducers.random_stream import KeyStream
from prismatic_tr.reducers.registry import get_strategy, selection_methods
from prismatic_tr.reducers.strategies.diverse_merge import nearest_owner
from prismatic_tr.reducers.tensor_ops import (
    gather_rows,
    gather_tokens,
    group_means,
    take_along,
    top_indices_after_prefix,
)
from prismatic_tr.vit.attention import attention_forward, check_attention_module
from prismatic_tr.vit.topk import query_row_scores

SCORINGS = ("attention", "norm")  # the towers' own scores; any registered selection strategy is allowed too
KEYED_MERGE = "diverse_merge_keys"  # diverse_merge with its cover chosen on the next block's attention keys
OWN_SCORINGS = SCORINGS + (LEARNED, KEYED_MERGE)  # the scorings this module implements itself (no reducers strategy)


def scorings() -> tuple[str, ...]:
    """Every scoring a shared selection accepts: :data:`SCORINGS`, ``"learned"``, ``"diverse_merge_keys"``, then
    the reducers' selection strategies."""
    return OWN_SCORINGS + tuple(m for m in selection_methods() if m not in SCORINGS)


def tower_width(tower: nn.Module) -> int:
    """The token width C of a timm ViT (``embed_dim``, else its first block's ``norm1`` size)."""
    width = getattr(tower, "embed_dim", None)
    return int(width) if isinstance(width, int) else int(tower.blocks[0].norm1.normalized_shape[0])


def _gated(x: torch.Tensor, gate: torch.Tensor, num_prefix: int) -> torch.Tensor:
    """(B, P + K, C) tokens times the (B, K) gate on the patch rows (prefix rows times 1)."""
    full = torch.nn.functional.pad(gate, (num_prefix, 0), value=1.0) if num_prefix else gate
    return x * full.unsqueeze(-1).to(x.dtype)


def reduction_block(depth: int, depth_fraction: float) -> int:
    """The block after which tokens are reduced: ``ceil(f * (depth - 1)) - 1`` for a tower that runs blocks
    ``0 .. depth - 2`` (OpenVLA takes block ``depth - 2``); f = 0.25 of DINOv2-L (24) -> block 5, of SigLIP (27) -> 6."""
    return max(0, math.ceil(depth_fraction * (depth - 1)) - 1)


@dataclass
class SharedSelectionConfig:
    """depth_fraction in (0, 1): where (fraction of the blocks a tower runs); keep_ratio in (0, 1]: patches
    kept; method: the scoring, one of :func:`scorings`; seed: of a method that draws at random (``random``)."""

    depth_fraction: float
    keep_ratio: float
    method: str = "attention"
    seed: int = 0

    def __post_init__(self) -> None:
        check_fraction("depth_fraction", self.depth_fraction, closed_high=False, what="a fraction of the depth")
        check_fraction("keep_ratio", self.keep_ratio, what="the fraction of patches kept")
        if self.method not in scorings():
            raise ValueError(f"method={self.method!r} is not allowed; use one of {scorings()}")


def _query_keys(attn: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k (B, H, N, d) of a timm ``Attention`` on x (B, N, C), after its q / k norms."""
    b, n, _ = x.shape
    q, k, _ = attn.qkv(x).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    return attn.q_norm(q), attn.k_norm(k)


def patch_scores(tower: nn.Module, block: int, x: torch.Tensor, scoring: str | ReducerConfig,
                 key: torch.Tensor | None = None) -> torch.Tensor:
    """(B, P + N, C) output of ``tower.blocks[block]`` -> (B, N) importance of the patch tokens.

    ``scoring``: "attention" or "norm", or the :class:`ReducerConfig` of a registered selection strategy, which
    scores the patch tokens (its ``keep_ratio`` the fraction kept; ``key`` a 0-d int64 key when the
    strategy draws at random)."""
    p = tower.num_prefix_tokens
    if isinstance(scoring, ReducerConfig):
        return get_strategy(scoring.method).score(x[:, p:], scoring, key)
    if scoring == "norm" or block + 1 >= len(tower.blocks):
        return torch.linalg.vector_norm(x[:, p:], dim=-1, dtype=torch.float32)
    nxt = tower.blocks[block + 1]
    q, k = _query_keys(nxt.attn, nxt.norm1(x))
    return query_row_scores(q, k, nxt.attn.scale, p)


def merges(scoring: str) -> bool:
    """True when ``scoring`` merges the patches it does not keep: ``diverse_merge_keys``, or a reducers strategy
    that merges (``diverse_merge``)."""
    return scoring == KEYED_MERGE or (scoring not in OWN_SCORINGS and get_strategy(scoring).merges)


def next_block_keys(tower: nn.Module, block: int, out: torch.Tensor) -> torch.Tensor:
    """(B, P + N, C) output of ``tower.blocks[block]`` -> (B, P + N, H * d): the keys ``tower.blocks[block + 1]``'s
    attention computes from it (after its ``norm1`` and key norm), every head's side by side."""
    nxt = tower.blocks[block + 1]
    _, k = _query_keys(nxt.attn, nxt.norm1(out))       # (B, H, P + N, d)
    return k.transpose(1, 2).flatten(2)


def _merged(out: torch.Tensor, owner: torch.Tensor, k: int, num_prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, P + N, C) tokens, (B, N) group of each patch -> (B, P + k, C): the prefix, then each group's mean; and the
    (B, k) group sizes."""
    merged, sizes = group_means(out[:, num_prefix:], owner, k)
    return (torch.cat([out[:, :num_prefix], merged], dim=1) if num_prefix else merged), sizes


class _WeightedAttention:
    """Instance-level ``forward`` of a timm ``Attention`` after the cut of a merging selection: the module's own
    attention (:func:`~prismatic_tr.vit.attention.attention_forward`) with ``log n`` added on the key column of a
    patch token that stands for n patches (prefix tokens: n = 1). The sizes, (B, K) float32, are the record's of the
    pass in flight (``record()``: ``towers.sizes``); the bias is made once per pass and prefix count
    (``towers.bias``) and read by every later block."""

    def __init__(self, attn: nn.Module, num_prefix: int, record: Callable[[], CallRecord | None]) -> None:
        self.attn, self.num_prefix, self.record = attn, num_prefix, record

    def __call__(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        if attn_mask is not None or is_causal:
            raise ValueError("attn_mask / is_causal are not supported after a merging selection's cut; remove it first")
        record, p = self.record(), self.num_prefix
        handed = record.towers if record is not None else None
        sizes = handed.sizes if handed is not None else None
        if sizes is None or tuple(sizes.shape) != (x.shape[0], x.shape[1] - p):
            got = None if sizes is None else tuple(sizes.shape)
            raise ValueError(f"a block after the merge got {tuple(x.shape[:2])} tokens but the pass's group sizes are "
                             f"{got}: the towers must run through the scoring tower's cut in the same pass")
        bias = handed.bias.get(p)
        if bias is None:
            log_n = torch.log(sizes)
            bias = (torch.nn.functional.pad(log_n, (p, 0)) if p else log_n)[:, None, None, :]  # prefix: log 1 = 0
            handed.bias[p] = bias
        return attention_forward(self.attn, x, bias=bias).out


class SharedSelectionHandle:
    """Hooks on the towers; ``remove()`` (or leaving a ``with`` block) restores them exactly.

    ``blocks``: the block index per tower; ``num_patches``: N per image; ``kept``: n. The scoring tower's choice,
    (B, n) patch indices, is handed to the other towers of the same pass through the record of the call in flight
    (``CallRecord.towers``, :mod:`prismatic_tr.calls`: the caller's, ``record()``, else one the handle opens
    when the scoring tower runs and drops once the last tower has gathered, so nothing crosses to the next pass) and
    to ``on_select(indices, sizes)``, if given (``sizes``: (B, n) group sizes of a merging strategy, else None), each
    time the scoring tower chooses (once per image when a backbone runs its
    towers image by image).
    """

    def __init__(self, towers: Sequence[nn.Module], config: SharedSelectionConfig,
                 on_select: Callable[[torch.Tensor, torch.Tensor | None], None] | None = None,
                 scorer: CoverScorer | None = None,
                 record: RecordSource | None = None) -> None:
        self.towers, self.config, self.on_select = list(towers), config, on_select
        if (scorer is not None) != (config.method == LEARNED):
            raise ValueError(f"method={config.method!r} with scorer={type(scorer).__name__}: a CoverScorer goes "
                             f"with scoring {LEARNED!r}, and only with it")
        self.scorer = scorer
        self.blocks = [reduction_block(len(t.blocks), config.depth_fraction) for t in self.towers]
        self.num_patches = int(self.towers[0].patch_embed.num_patches)
        self.kept = num_kept(self.num_patches, config.keep_ratio)
        self.records = Records(record)
        self._scoring: str | ReducerConfig = config.method if config.method in OWN_SCORINGS else \
            ReducerConfig(method=config.method, keep_ratio=config.keep_ratio)
        # diverse_merge_keys: diverse's cover, run on the next block's keys
        self._cover = ReducerConfig(method="diverse", keep_ratio=config.keep_ratio) \
            if config.method == KEYED_MERGE else None
        self._keys = KeyStream(config.seed) if draws_at_random(config.method) else None
        self.merges = merges(config.method)
        self._groups = None if config.method in OWN_SCORINGS else get_strategy(config.method).groups
        self._weighted: list[tuple[nn.Module, Any]] = []  # (attention module, its own instance forward or None)
        if self.merges:
            def current() -> CallRecord | None:  # a closure: torch 2.2's dynamo cannot call a bound method
                return self.records.current()

            for t, j in zip(self.towers, self.blocks, strict=True):
                for blk in list(t.blocks)[j + 1:]:
                    self._weighted.append((blk.attn, blk.attn.__dict__.get("forward")))
                    blk.attn.forward = _WeightedAttention(blk.attn, t.num_prefix_tokens, current)
        self._hooks = [t.blocks[j].register_forward_hook(self._hook(i)) for i, (t, j) in enumerate(
            zip(self.towers, self.blocks, strict=True))]

    def _hook(self, tower_index: int) -> Any:
        tower, block = self.towers[tower_index], self.blocks[tower_index]

        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
            p = tower.num_prefix_tokens
            if tower_index == 0:
                return self._select(tower, block, out)
            record = self.records.current()
            handed = record.towers if record is not None else None
            chosen = handed.chosen if handed is not None else None
            if chosen is None or chosen.shape[0] != out.shape[0]:
                raise ValueError("the scoring tower did not run before this one in this forward; a shared "
                                 "selection needs the backbone to run its first tower first")
            if self.merges:  # the scoring tower's groups, this tower's tokens
                kept = _merged(out, handed.owner, self.kept, p)[0]
            else:
                kept = gather_rows(out, chosen, p)
            kept = kept if handed.gate is None else _gated(kept, handed.gate, p)
            if tower_index == len(self.towers) - 1:  # the pass is complete: its choice is not kept
                record.towers = TowersPass(None, None, None, handed.sizes, handed.bias)
                if not self.merges:  # a merge's sizes stay for this tower's later blocks (the next pass replaces them)
                    self.records.end()
            return kept

        return hook

    def _select(self, tower: nn.Module, block: int, out: torch.Tensor) -> torch.Tensor:
        """The scoring tower: choose, remember and gather (B, P + N, C) -> (B, P + K, C)."""
        p = tower.num_prefix_tokens
        if self._groups is not None:  # a strategy that makes its own groups (pair_merge): no scores, no cover
            chosen, owner = self._groups(out[:, p:], self.kept)
            kept, sizes = _merged(out, owner, self.kept, p)
            return self._hand_on(chosen, None, owner, sizes, kept)
        log_weights = None
        if self.scorer is not None:
            log_weights = self.scorer.log_weights(out[:, p:])
            scores = self.scorer.order(out[:, p:], self.kept, log_weights)
        else:
            key = self._keys.next_key() if self._keys is not None else None
            if self._cover is not None:
                scores = patch_scores(tower, block, next_block_keys(tower, block, out), self._cover)
            else:
                scores = patch_scores(tower, block, out, self._scoring, key)
        positions = top_indices_after_prefix(scores, self.kept, p)
        chosen = positions[:, p:] - p if p else positions  # patch indices
        owner = sizes = None
        if self.merges:  # every patch into its nearest kept one: (B, K) group means and sizes
            owner = nearest_owner(out[:, p:], chosen)
            kept, sizes = _merged(out, owner, self.kept, p)
        else:
            kept = gather_tokens(out, positions)
        gate = None
        if log_weights is not None and log_weights.requires_grad:  # training the scorer: the gate carries its loss
            gate = straight_through_gate(take_along(log_weights, chosen))
            kept = _gated(kept, gate, p)
        return self._hand_on(chosen, gate, owner, sizes, kept)

    def _hand_on(self, chosen: torch.Tensor, gate: torch.Tensor | None, owner: torch.Tensor | None,
                 sizes: torch.Tensor | None, kept: torch.Tensor) -> torch.Tensor:
        """Tell ``on_select``, leave the choice for the other towers and this pass's later blocks; ``kept``."""
        if self.on_select is not None:
            self.on_select(chosen, sizes)
        if len(self.towers) > 1 or self.merges:  # for the other towers and the later blocks of this pass
            self.records.begin().towers = TowersPass(chosen, gate, owner, sizes, {})
        return kept

    def reseed(self) -> None:
        """Restart a random scoring's draws from the configured seed (nothing for the others)."""
        if self._keys is not None:
            self._keys.reseed(self.config.seed)

    def remove(self) -> None:
        """Detach the hooks. Safe to call twice."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        for attn, own in self._weighted:  # the attention modules' forward as it was
            del attn.forward
            if own is not None:
                attn.forward = own
        self._weighted = []
        self.records.end()

    def __enter__(self) -> SharedSelectionHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def draws_at_random(scoring: str) -> bool:
    """True when ``scoring`` is a reducers strategy that draws a fresh random key per call (``random``)."""
    return scoring not in OWN_SCORINGS and get_strategy(scoring).uses_key


def check_towers(towers: Sequence[nn.Module]) -> None:
    """ValueError unless ``towers`` are timm ``VisionTransformer``-like with one patch grid."""
    if not towers:
        raise ValueError("a shared selection needs at least one tower")
    counts = []
    for t in towers:
        blocks = getattr(t, "blocks", None)
        if not isinstance(blocks, (nn.Sequential, nn.ModuleList)) or not isinstance(getattr(t, "num_prefix_tokens", None), int):
            raise ValueError(f"{type(t).__name__} is not a timm VisionTransformer (blocks, num_prefix_tokens)")
        check_attention_module(blocks[0].attn)
        counts.append(int(t.patch_embed.num_patches))
    if len(set(counts)) != 1:
        raise ValueError(f"the towers have different patch counts {counts}; a shared selection needs one grid")


def apply_shared_selection(
    towers: Sequence[nn.Module], depth_fraction: float, keep_ratio: float, method: str = "attention",
    on_select: Callable[[torch.Tensor, torch.Tensor | None], None] | None = None, seed: int = 0,
    scorer: CoverScorer | None = None,
    record: RecordSource | None = None,
) -> SharedSelectionHandle:
    """Reduce the patch tokens of ``towers`` (timm ViTs, the first scores) inside them; see the module doc.
    ``scorer``: the trained weights of scoring ``"learned"`` (default: zeros, which pick as ``"diverse"``);
    ``record``: the record of the caller's call in flight, which the towers' choice goes into (default: one per
    pass of the towers).

    Raises ValueError (before any hook is attached) for bad settings, towers that are not timm
    ``VisionTransformer``-like, or towers whose patch grids differ.
    """
    config = SharedSelectionConfig(depth_fraction, keep_ratio, method, seed)
    check_towers(towers)
    if method == LEARNED and scorer is None:
        scorer = CoverScorer(tower_width(towers[0]))
    return SharedSelectionHandle(towers, config, on_select, scorer, record)
