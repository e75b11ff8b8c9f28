"""Issue 48's experiment: other ways to make `diverse_merge`'s groups and merged tokens, measured on MetaWorld
before any enters the settings grammar.

`diverse_merge` (both sites) keeps `diverse`'s cover as representatives, gives every patch to its nearest
representative by cosine similarity (``nearest_owner``), and puts out each group's mean with the group's size
(``group_means``). For the run, ``--groups`` replaces that in both sites, sizes (and so the proportional attention)
unchanged in meaning, the representatives and their positions unchanged:

* ``mean``: `diverse_merge` itself (the baseline; nothing patched);
* ``anchor``: a merged token is half its representative's own patch and half the mean of the others in its group
  (the representative weighs as much as the rest together), so that a small object's kept patch is not washed
  into the background that joins it;
* ``representative``: a merged token is its representative's patch alone; only the sizes come from the groups
  (`diverse`'s tokens with proportional attention);
* ``local``: a patch goes to the representative of highest cosine similarity minus ``--locality`` times their
  distance on the patch grid over the grid's side, so that a group stays in one region of the image;
* ``lloyd``: the groups refined by one step of k-means (every patch to the group mean nearest in cosine, each
  representative kept in its own group).

Everything else is ``vla_scripts/eval_metaworld.py``'s run, given its arguments after ``--``:

    python benchmarks/metaworld_merge_groups.py --groups anchor -- --split validation --episodes 30 \\
        --settings "[none,diverse_merge:0.25,vision:diverse_merge:0.25@0.25]" --timing_runs 0 --output_dir OUT

The way (and ``--locality``) is part of the run's journal identity (``patch``), so a folder journaled by another
way, or by a plain run, is refused (exit 2, before any work); ``mean`` patches nothing and shares a plain run's
journal. The modules are patched for this process only (``merge_groups`` puts them back), so ``--workers`` must be 1.
Static shapes and no host sync, as `diverse_merge` itself: one (B, N, K) similarity, scatter-adds.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

import prismatic_tr.reducers.strategies.diverse_merge as diverse_merge
import prismatic_tr.vit.shared as shared
from prismatic_tr.cli import BadInputError, command_line, parse_config_or_exit, report_bad_input
from prismatic_tr.policy.metaworld_eval import EvalMetaWorldConfig, run_eval_metaworld, table, write_results
from prismatic_tr.reducers.merge_groups import GROUPS, lloyd_owner, local_owner, weighted_means

PROG = "metaworld_merge_groups.py"
__all__ = ["GROUPS", "journal_patch", "main", "merge_groups"]


@contextlib.contextmanager
def merge_groups(groups: str, locality: float = 1.0) -> Iterator[None]:
    """Inside the block, `diverse_merge` at both sites makes its groups and tokens the ``groups`` way."""
    if groups not in GROUPS:
        raise ValueError(f"groups={groups!r} is not allowed; use one of {GROUPS}")
    if groups == "mean":
        yield
        return
    saved = diverse_merge.nearest_owner, diverse_merge.group_means, shared.nearest_owner, shared.group_means
    original_owner, original_means = saved[0], saved[1]
    last: dict[str, torch.Tensor] = {}   # the representatives of the pass in flight, for the towers after the first

    def owner_of(patches: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        last["idx"] = idx
        if groups == "local":
            return local_owner(patches, idx, locality)
        owner = original_owner(patches, idx)
        return lloyd_owner(patches, owner, idx) if groups == "lloyd" else owner

    def means_of(patches: torch.Tensor, owner: torch.Tensor, k: int,
                 weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if groups in ("anchor", "representative"):
            return weighted_means(patches, owner, last["idx"], groups)
        return original_means(patches, owner, k, weights)

    diverse_merge.nearest_owner = shared.nearest_owner = owner_of
    diverse_merge.group_means = shared.group_means = means_of
    try:
        yield
    finally:
        diverse_merge.nearest_owner, diverse_merge.group_means, shared.nearest_owner, shared.group_means = saved


def journal_patch(groups: str, locality: float = 1.0) -> dict[str, Any] | None:
    """The run's patch in its journal identity: None for ``mean`` (nothing patched: a plain run's journal)."""
    return None if groups == "mean" else {"merge_groups": groups, **({"locality": locality} if groups == "local" else {})}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", required=True, choices=GROUPS, help="how groups and merged tokens are made")
    parser.add_argument("--locality", type=float, default=1.0, help="--groups local: weight of the grid distance")
    args = parser.parse_args(argv[:split])
    if not args.locality >= 0.0:
        parser.error(f"--locality {args.locality!r}: give a number >= 0")
    cfg = parse_config_or_exit(EvalMetaWorldConfig, argv[split + 1:], PROG, description=__doc__)
    patch = journal_patch(args.groups, args.locality)
    with merge_groups(args.groups, args.locality):
        try:
            records, meta = run_eval_metaworld(cfg, command_line("benchmarks/metaworld_merge_groups.py"), patch)
        except BadInputError as err:
            raise SystemExit(report_bad_input(PROG, err)) from None
    print(table(records))
    write_results(cfg.output_dir, records, {**meta, "merge_groups": args.groups, **(patch or {})})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
