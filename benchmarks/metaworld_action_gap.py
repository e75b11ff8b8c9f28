"""How far each reduction moves the MetaWorld policy's action chunk on recorded on-policy states (a screen, not a
choice: closed-loop validation episodes choose).

    python benchmarks/metaworld_action_gap.py --driver diverse_merge:0.1 --data_root DIR \\
        --settings vision:diverse_merge:0.25@0.25 vision:diverse_merge_keys:0.25@0.25 \\
        --output benchmarks/results/metaworld/shipped/action_gap/projector_states.json

The states: ``<data_root>/metaworld_mt10``, the on-policy episodes of the shipped policy driven under ``--driver``
(``--episodes_per_task`` a task from the demonstrations split's seed 100,000, labelled by the policy unreduced), made
there first when missing (:func:`prismatic_tr.policy.metaworld_onpolicy.make_onpolicy_dataset`, the adapters'
recipe's own data, so a recipe run's ``<output_dir>/data`` can be given); a held dataset of another job is refused
(exit 2). Every ``--every``-th step, up to ``--states``; every setting on the same states
(:func:`prismatic_tr.bench.vla.action_gap.action_gaps`), overall and per task (``by_group``: a mean over the
tasks hides the one a setting moves). Writes the record (JSON) and prints the table. Measures no time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch  # torch before tensorflow, always

PROG = "metaworld_action_gap.py"
DEFAULT_POLICY = Path("prismatic_tr/assets/metaworld_policy")
DATASET = "metaworld_mt10"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from prismatic_tr.cli import check_int_flag
    from prismatic_tr.vla.spec import parse_setting

    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--vla_path", type=Path, default=DEFAULT_POLICY, help="the OFT MetaWorld policy (default: shipped)")
    ap.add_argument("--driver", required=True, help="the setting the policy drives the recorded episodes under")
    ap.add_argument("--data_root", type=Path, required=True, help="holds (or gets) the on-policy dataset")
    ap.add_argument("--episodes_per_task", type=int, default=40, help="on-policy episodes a task (>= 1)")
    ap.add_argument("--states", type=int, default=500, help="states compared (>= 1)")
    ap.add_argument("--every", type=int, default=8, help="every n-th recorded step (>= 1)")
    ap.add_argument("--settings", nargs="+", required=True, help="settings compared with the unreduced policy")
    ap.add_argument("--num_threads", type=int, default=1, help="torch threads (>= 1)")
    ap.add_argument("--output", type=Path, required=True, help="the record (JSON)")
    args = ap.parse_args(argv)
    try:
        for flag in ("episodes_per_task", "states", "every", "num_threads"):
            check_int_flag(flag, getattr(args, flag), 1)
        args.parsed = [parse_setting(s) for s in args.settings]
        if not parse_setting(args.driver).reductions():
            raise ValueError(f"--driver {args.driver!r} does not reduce; give the setting the episodes run under")
        if not (args.vla_path / "config.json").is_file():
            raise ValueError(f"--vla_path {str(args.vla_path)!r} is not a checkpoint directory (no config.json)")
        check_data(args)
    except ValueError as err:
        ap.error(str(err))
    return args


def job_of(args: argparse.Namespace) -> object:
    from prismatic_tr.envs.metaworld.tasks import MT10
    from prismatic_tr.policy.metaworld_onpolicy import ONPOLICY_SEED, OnPolicyJob

    return OnPolicyJob(str(args.vla_path), args.driver, tuple(MT10), args.episodes_per_task, ONPOLICY_SEED, 8, 224)


def check_data(args: argparse.Namespace) -> None:
    from prismatic_tr.policy.metaworld_onpolicy import ONPOLICY_SUMMARY, check_onpolicy_data

    check_onpolicy_data(args.data_root / DATASET / ONPOLICY_SUMMARY, job_of(args), "--data_root")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from prismatic_tr.bench.measure.devices import cpu_info
    from prismatic_tr.bench.vla.action_gap import action_gaps, recorded_batches
    from prismatic_tr.envs.metaworld.tasks import MT10, TASKS
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.metaworld_onpolicy import ONPOLICY_SUMMARY, make_onpolicy_dataset

    torch.set_num_threads(args.num_threads)
    summary = args.data_root / DATASET / ONPOLICY_SUMMARY
    if not summary.is_file():
        make_onpolicy_dataset(job_of(args), args.data_root, DATASET)
    vla, processor = load_vla(args.vla_path)
    recorded = recorded_batches(args.data_root, DATASET, processor, vla.norm_stats[DATASET], args.states, args.every)
    task_of = {TASKS[name].instruction: name for name in MT10}
    tasks = [task_of.get(text, text) for text in recorded.instructions]
    names = list(dict.fromkeys(tasks))
    print("| setting | L1 to unreduced | first action | L1 to label | " + " | ".join(names) + " |\n"
          + "| --- " * (4 + len(names)) + "|")
    gaps = action_gaps(vla.eval(), recorded.batches, args.parsed, lambda label, f: print(
        f"| `{label}` | {f['l1_to_unreduced']:.4f} | {f['l1_to_unreduced_first']:.4f} | {f['l1_to_label']:.4f} | "
        + " | ".join(f"{f['by_group'][n]['l1_to_unreduced']:.4f}" for n in names) + " |", flush=True), groups=tasks)
    record = {"meta": {"command": "python " + " ".join([f"benchmarks/{PROG}", *sys.argv[1:]]),
                       "policy": str(args.vla_path), "states_job": json.loads(summary.read_text())["job"],
                       "every": args.every, "cpu": cpu_info(), "torch": torch.__version__}, "settings": gaps}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
