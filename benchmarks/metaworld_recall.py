"""Which patches does each selection keep on MetaWorld? Per camera and task: the object, the goal marker, the gripper.

    python benchmarks/metaworld_recall.py --episodes 5 --output benchmarks/results/metaworld/recall/recall.json

For each MT10 task and the first ``--episodes`` validation seeds (unseen goals; the split for choosing), the first
observation and the one halfway along MetaWorld's scripted expert's episode; each camera's 16 x 16 patches labelled
from a segmentation render (``prismatic_tr.envs.metaworld.patch_labels``); the policy's towers run under each
setting (``prismatic_tr.bench.vla.metaworld_recall.SETTINGS``: ``diverse`` at both sites and keeps, ``random`` at
keep 0.25 as the floor); and, unreduced, the share of the action slots' attention on the visual tokens that each
camera and label gets, beside its area. Writes the record (JSON, every task) and prints the pooled tables
(markdown) that ``<output>.md`` keeps beside it. Needs the metaworld extra and OSMesa. Measures no time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch  # noqa: F401  (torch first, always)

from prismatic_tr.bench.vla.metaworld_recall import attention_markdown, markdown, metaworld_recall

PROG = "metaworld_recall.py"
DEFAULT_POLICY = Path("prismatic_tr/assets/metaworld_policy")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from prismatic_tr.envs.metaworld.tasks import MT10
    from prismatic_tr.policy.metaworld_eval import check_metaworld_command

    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--vla_path", type=Path, default=DEFAULT_POLICY, help="an OFT MetaWorld policy (default: shipped)")
    ap.add_argument("--tasks", nargs="+", default=list(MT10), help=f"some of {list(MT10)}")
    ap.add_argument("--episodes", type=int, default=5, help="validation seeds per task (>= 1)")
    ap.add_argument("--output", type=Path, default=Path("benchmarks/results/metaworld/recall/recall.json"))
    args = ap.parse_args(argv)
    try:
        check_metaworld_command(args.tasks, args.episodes, 1, args.vla_path)
    except ValueError as err:
        ap.error(str(err))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    record = metaworld_recall(args.vla_path, args.tasks, args.episodes, "python " + " ".join(sys.argv))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=1) + "\n")
    table = markdown(record) + "\n\n" + attention_markdown(record["attention"])
    args.output.with_suffix(".md").write_text(table + "\n")
    print(table)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
