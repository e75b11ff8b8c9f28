"""Issue 48's experiment: `diverse_merge`'s groups at the projector site grown by merging the most alike pairs
(token merging's way) instead of around a max-min cover, measured on MetaWorld before it entered the settings grammar
as ``pair_merge``.

For the run, the projector site's `diverse_merge:<keep>` is ``pair_merge:<keep>``
(:mod:`prismatic_tr.reducers.strategies.pair_merge`: rounds of bipartite matching, the most alike pairs merged
first, a patch like no other last; each output token its group's mean at its representative's position, with its
group's size, so the language model's proportional attention is as before). It is kept as the record of the runs it
made (``benchmarks/results/metaworld/shipped/validation_pair_merge/``, ``test_pair_merge_100/``): a plain run of
``pair_merge:<keep>`` computes the same (``tests/envs/test_pair_merge.py``). Only ``none`` and projector-site
``diverse_merge`` settings are allowed (exit 2). Everything else is ``vla_scripts/eval_metaworld.py``'s run, given
its arguments after ``--``:

    python benchmarks/metaworld_pair_merge.py -- --split validation --episodes 50 \\
        --settings "[none,diverse_merge:0.5]" --workers 1 --timing_runs 0 --output_dir OUT

The patch is part of the run's journal identity (``{"pair_merge": true}``), so a folder journaled by a plain run
is refused (exit 2, before any work; ``benchmarks/metaworld_seed_unreduced.py`` starts one with a plain run's
unreduced jobs). The registry entry is replaced for this process only (``pair_groups`` puts it back), so
``--workers`` must be 1.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import replace

import prismatic_tr.reducers.registry as registry
from prismatic_tr.cli import BadInputError, command_line, parse_config_or_exit, report_bad_input
from prismatic_tr.policy.metaworld_eval import EvalMetaWorldConfig, run_eval_metaworld, table, write_results
from prismatic_tr.vla.settings import BASELINE
from prismatic_tr.vla.spec import parse_setting

PROG = "metaworld_pair_merge.py"
METHOD = "diverse_merge"
PAIRS = "pair_merge"
PATCH = {"pair_merge": True}


@contextlib.contextmanager
def pair_groups() -> Iterator[None]:
    """Inside the block, the reducers' `diverse_merge` (the projector site's) makes its groups by pair merging."""
    saved = registry.get_strategy(METHOD)
    registry._STRATEGIES[METHOD] = replace(saved, reduce=registry.get_strategy(PAIRS).reduce)
    try:
        yield
    finally:
        registry._STRATEGIES[METHOD] = saved


def check_settings(settings: list[str]) -> None:
    """ValueError unless every setting is ``none`` or a projector-site ``diverse_merge`` alone."""
    for spec in settings:
        s = parse_setting(spec)
        if s.method != BASELINE and (s.method != METHOD or s.site != "projector" or s.also):
            raise ValueError(f"--settings {spec!r}: this experiment patches the projector site's {METHOD} only; "
                             f"allowed: none and {METHOD}:<keep>")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    if argv[:split]:
        print(f"{PROG}: error: unrecognized arguments before --: {' '.join(argv[:split])}", file=sys.stderr)
        return 2
    cfg = parse_config_or_exit(EvalMetaWorldConfig, argv[split + 1:], PROG, description=__doc__)
    try:
        check_settings(cfg.settings)
    except ValueError as err:
        return report_bad_input(PROG, err)
    with pair_groups():
        try:
            records, meta = run_eval_metaworld(cfg, command_line("benchmarks/metaworld_pair_merge.py"), PATCH)
        except BadInputError as err:
            raise SystemExit(report_bad_input(PROG, err)) from None
    print(table(records))
    write_results(cfg.output_dir, records, {**meta, **PATCH})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
