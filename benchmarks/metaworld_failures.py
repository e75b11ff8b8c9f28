"""Where and why a MetaWorld policy fails, task by task, on validation episodes (never the test split).

    python benchmarks/metaworld_failures.py --tasks reach-v3,push-v3,pick-place-v3,peg-insert-side-v3 --episodes 20 \
        --output_dir benchmarks/results/metaworld/diagnosis

For each task: the policy's closed loop and MetaWorld's scripted expert on the first ``--episodes`` validation
seeds, traced step by step (:mod:`prismatic_tr.policy.metaworld_diagnosis`): the phase each episode reached
(approach, contact, lift, transport, success), the failed episodes' median distances (hand to object, object to goal:
start, closest, last), the hand's offset from the object at its closest approach, and how the hand follows the
goal (state) and the object (cameras only) over episodes. Writes ``failures.json`` and ``failures.md`` into
``--output_dir``; and ``curves.md``: the policy's validation successes per task at every checkpoint its recipe
scored and its mean training loss per 500 steps (from the ``evaluation.json`` and ``training_curve.csv`` beside
``--vla_path``; ``--curves_only true`` writes only these, without running episodes). ``--setting`` traces the
policy reduced by that setting (the expert is the same either way). Needs the metaworld extra and OSMesa for the
episodes. Measures no time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch  # noqa: F401  (torch first, always)

from prismatic_tr.policy.metaworld_diagnosis import curves_markdown, diagnose_failures, failures_markdown


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from prismatic_tr.policy.bundled import bundled_metaworld_policy_dir
    from prismatic_tr.policy.metaworld_eval import check_metaworld_command

    ap = argparse.ArgumentParser(prog="metaworld_failures.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vla_path", type=Path, default=bundled_metaworld_policy_dir(),
                    help="an OFT checkpoint with metaworld_mt10 statistics (default: the shipped policy)")
    ap.add_argument("--tasks", default="reach-v3,push-v3,pick-place-v3,peg-insert-side-v3")
    ap.add_argument("--episodes", type=int, default=20, help="validation episodes per task (>= 2)")
    ap.add_argument("--output_dir", type=Path, required=True)
    ap.add_argument("--setting", default="none",
                    help="the policy reduced by this setting (a spec, e.g. diverse_merge:0.5; default: unreduced)")
    ap.add_argument("--curves_only", type=lambda v: v.lower() == "true", default=False,
                    help="true: write curves.md only (no episodes)")
    args = ap.parse_args(argv)
    args.tasks = args.tasks.split(",")
    try:
        check_metaworld_command(args.tasks, args.episodes, 2, args.vla_path)
    except ValueError as err:
        ap.error(str(err))
    from prismatic_tr.vla.spec import parse_setting

    try:
        parse_setting(args.setting)
    except ValueError as err:
        ap.error(f"--setting {args.setting!r}: {err}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    command = "python benchmarks/metaworld_failures.py " + " ".join(sys.argv[1:] if argv is None else argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if (args.vla_path / "evaluation.json").is_file():
        (args.output_dir / "curves.md").write_text(curves_markdown(args.vla_path, command))
    if args.curves_only:
        return
    for meta, records in diagnose_failures(args.vla_path, args.tasks, args.episodes, command, args.setting):
        # the records so far are written after every task
        (args.output_dir / "failures.json").write_text(json.dumps({"meta": meta, "tasks": records}, indent=1) + "\n")
        (args.output_dir / "failures.md").write_text(failures_markdown(records, command))
    print(failures_markdown(records, command))


if __name__ == "__main__":
    sys.exit(main())
