"""Issue 48's experiment: `diverse_merge` at the projector site with its groups averaged after the projector, not
before it, measured on MetaWorld before it enters the settings grammar.

`diverse_merge` at the ``projector`` site picks its cover and groups on the vision backbone's features and hands the
projector each group's mean feature: the language model then reads ``projector(mean(x_i))``. The projector is an MLP
with GELUs, so that is not ``mean(projector(x_i))``, the mean of the inputs the language model read unreduced for
those patches. With ``--after_projector`` the cover and the groups are the same (chosen on the backbone's features),
but the projector runs on every patch and each kept token is the mean of its group's projected tokens, so the
language model's first layer sees exactly the mean of the group's unreduced inputs, weighed by the group's size as
before. The cost: the projector on all N patches instead of K (a small share of a step at OpenVLA's size; measure it
before shipping). The ``vision`` site is not touched (its merge is inside the towers).

Everything else is ``vla_scripts/eval_metaworld.py``'s run, given its arguments after ``--``:

    python benchmarks/metaworld_projected_merge.py --after_projector -- --split validation --episodes 30 \\
        --settings "[none,diverse_merge:0.5,diverse_merge:0.25]" --timing_runs 0 --output_dir OUT

Without ``--after_projector`` nothing is patched (a plain run, sharing a plain run's journal); with it the patch is
part of the run's journal identity, so a folder journaled without it is refused (exit 2, before any work). The
modules are patched for this process only (``projected_merge`` puts them back), so ``--workers`` must be 1. Static
shapes and no host sync: one more projector pass over (B * n, P) tokens and one scatter-add.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

import torch

import prismatic_tr.reducers.strategies.diverse_merge as diverse_merge
from prismatic_tr.cli import BadInputError, command_line, parse_config_or_exit, report_bad_input
from prismatic_tr.models.vision import NativeProjector
from prismatic_tr.policy.metaworld_eval import EvalMetaWorldConfig, run_eval_metaworld, table, write_results
from prismatic_tr.reducers.tensor_ops import group_means

PROG = "metaworld_projected_merge.py"
PATCH = {"merge_after_projector": True}
__all__ = ["PATCH", "main", "projected_merge"]


@contextlib.contextmanager
def projected_merge() -> Iterator[None]:
    """Inside the block, the projector-site `diverse_merge` averages each group after the projector.

    The projector-site reducer's ``merge_into`` leaves its (B * n, P, D) features, (B * n, P) groups and the merged
    tokens it returns; a projector call given exactly those merged tokens (B, n * K, D) maps all P patches of every
    image instead and returns the (B, n * K, llm_dim) group means. Any other projector call (unreduced, or after a
    backbone call whose output never reached the projector) clears what was left and runs as it is."""
    saved_merge, saved_forward = diverse_merge.merge_into, NativeProjector.forward
    pending: dict[str, torch.Tensor] = {}

    def merge_into(patches: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        owner = diverse_merge.nearest_owner(patches, idx)
        merged, sizes = group_means(patches, owner, idx.shape[1])
        pending.update(patches=patches, owner=owner, merged=merged)
        return merged, sizes

    def forward(self: NativeProjector, img_patches: torch.Tensor) -> torch.Tensor:
        left = dict(pending)
        pending.clear()
        merged = left.get("merged")
        if merged is None or img_patches.numel() != merged.numel() or \
                not torch.equal(img_patches.reshape(merged.shape), merged):
            return saved_forward(self, img_patches)
        means, _ = group_means(saved_forward(self, left["patches"]), left["owner"], merged.shape[1])
        return means.reshape(*img_patches.shape[:2], -1)                  # (B * n, K, llm_dim) -> (B, n * K, llm_dim)

    diverse_merge.merge_into, NativeProjector.forward = merge_into, forward
    try:
        yield
    finally:
        diverse_merge.merge_into, NativeProjector.forward = saved_merge, saved_forward


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--after_projector", action="store_true", help="average each group after the projector")
    args = parser.parse_args(argv[:split])
    cfg = parse_config_or_exit(EvalMetaWorldConfig, argv[split + 1:], PROG, description=__doc__)
    patch = PATCH if args.after_projector else None
    with projected_merge() if args.after_projector else contextlib.nullcontext():
        try:
            records, meta = run_eval_metaworld(cfg, command_line("benchmarks/metaworld_projected_merge.py"), patch)
        except BadInputError as err:
            raise SystemExit(report_bad_input(PROG, err)) from None
    print(table(records))
    write_results(cfg.output_dir, records, {**meta, **(patch or {})})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
