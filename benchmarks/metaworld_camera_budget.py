"""Issue 48's experiment: a budget per camera at the projector site on MetaWorld, measured on validation before it
enters the settings grammar.

For the run, every per-image `diverse` reduction at the projector site keeps ``--budgets`` of each camera's patches
(in the backbone's image order: the fixed ``corner3`` camera first, then ``gripperPOV``), each camera with its own
max-min cover (``prismatic_tr.reducers.strategies.diverse.max_min_order``), instead of the setting's one fraction for
every camera; everything else is ``vla_scripts/eval_metaworld.py``'s run, given its arguments after ``--``:

    python benchmarks/metaworld_camera_budget.py --budgets 0.1,0.4 -- --split validation --episodes 10 \\
        --settings "[none,diverse:0.25]" --timing_runs 0 --output_dir OUT

The ``diverse:0.25`` row then holds 0.1 x 256 + 0.4 x 256 = 128 visual tokens, as many as the setting's own. A
merging setting (``diverse_merge``) keeps the same covers and folds every other patch of a camera into its nearest
kept one of that camera (``prismatic_tr.reducers.strategies.diverse_merge.merge_into``), the group sizes handed on
as the setting's own (the language model weighs each merged token by them). The
class is patched for this process only (``camera_budgets`` puts it back), so ``--workers`` must be 1; the budgets are
part of the run's journal identity (``patch``), so a folder journaled with other budgets, or by a plain run, is
refused (exit 2, before any work).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

import torch

from prismatic_tr.cli import BadInputError, command_line, parse_config_or_exit, report_bad_input
from prismatic_tr.policy.metaworld_eval import EvalMetaWorldConfig, run_eval_metaworld, table, write_results
from prismatic_tr.reducers.strategies.diverse import max_min_order
from prismatic_tr.reducers.strategies.diverse_merge import merge_into
from prismatic_tr.vla.layout import PerImageReducer

PROG = "metaworld_camera_budget.py"


@contextlib.contextmanager
def camera_budgets(fractions: list[float]) -> Iterator[None]:
    """Inside the block, :class:`PerImageReducer` keeps ``fractions[i]`` of image i's patches by the max-min cover."""

    def counts(patches: int) -> list[int]:
        return [max(1, round(f * patches)) for f in fractions]

    def output_tokens(self: PerImageReducer, num_tokens: int) -> int:
        return sum(counts(self.layout.patches))

    def reduce(self: PerImageReducer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if self.layout.num_images != len(fractions):
            raise ValueError(f"--budgets has {len(fractions)} fractions; the backbone encodes "
                             f"{self.layout.num_images} images")
        p, d = self.layout.patches, x.shape[-1]
        merges = self.reducer.strategy.merges
        tokens, positions, sizes = [], [], []
        for i, k in enumerate(counts(p)):
            image = x[:, i * p:(i + 1) * p]
            kept = max_min_order(image, k).topk(k, dim=1).indices.sort(dim=1).values  # (B, k), in spatial order
            if merges:
                merged, size = merge_into(image, kept)
                tokens.append(merged)
                sizes.append(size)
            else:
                tokens.append(torch.gather(image, 1, kept[..., None].expand(-1, -1, d)))
            positions.append(kept + i * p)
        # sizes None: each token one patch
        return torch.cat(tokens, dim=1), torch.cat(positions, dim=1), torch.cat(sizes, dim=1) if merges else None

    saved = PerImageReducer.output_tokens, PerImageReducer.reduce
    PerImageReducer.output_tokens, PerImageReducer.reduce = output_tokens, reduce
    try:
        yield
    finally:
        PerImageReducer.output_tokens, PerImageReducer.reduce = saved


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", required=True, help="fractions kept per camera, comma-separated")
    args = parser.parse_args(argv[:split])
    try:
        fractions = [float(f) for f in args.budgets.split(",")]
        if not all(0.0 < f <= 1.0 for f in fractions):
            raise ValueError
    except ValueError:
        parser.error(f"--budgets {args.budgets!r}: give fractions in (0, 1], comma-separated, one per camera")
    cfg = parse_config_or_exit(EvalMetaWorldConfig, argv[split + 1:], PROG, description=__doc__)
    with camera_budgets(fractions):
        try:
            records, meta = run_eval_metaworld(cfg, command_line("benchmarks/metaworld_camera_budget.py"),
                                               {"camera_budgets": fractions})
        except BadInputError as err:
            raise SystemExit(report_bad_input(PROG, err)) from None
    print(table(records))
    write_results(cfg.output_dir, records, {**meta, "camera_budgets": fractions})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
