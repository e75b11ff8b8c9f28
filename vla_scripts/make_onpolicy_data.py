"""On-policy episodes for fine-tuning under reduction, as an RLDS dataset (``prismatic_tr.policy.onpolicy``).

The policy with ``--setting`` attached (the student) runs ``--num_episodes`` episodes of the task; every step
records the image it saw and the action the same policy takes there unreduced (the teacher). The result is a
dataset like ``make_demos.py``'s, read by ``vla_scripts/finetune.py --data_root_dir <output_dir>``:

    python vla_scripts/make_onpolicy_data.py --setting vision:diverse:0.1@0.25 --num_episodes 1000 \\
        --output_dir outputs/onpolicy

An OpenVLA-OFT policy (``--vla_path`` an OFT checkpoint) acts as in the closed loop (chunks, ``--execute_steps`` of
each open loop) and every step is labelled with the teacher's whole chunk, both cameras and the state recorded
(``prismatic_tr.policy.onpolicy.relabelled_oft_episodes``); ``vla_scripts/train_oft_policy.py --init_oft`` trains on it.

Seeds come from the demonstrations split (default: 3000 on, after the recipe's 3000 demonstrations), scenes from
the demonstrations' distribution (1-5 objects). Writes ``<output_dir>/<dataset_name>/1.0.0`` and ``onpolicy.json``
(config, seeds, the student's success while collecting, steps). Bad flags exit with status 2 before any work.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import json
import sys
from collections.abc import Sequence

from prismatic_tr.cli import BadInputError, command_line, parse_config_or_exit, report_bad_input
from prismatic_tr.policy.onpolicy_data import OnPolicyConfig, make_onpolicy_data

PROG = "make_onpolicy_data.py"


def main(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-make-onpolicy-data``): parse ``argv``, collect, write ``onpolicy.json``."""
    cfg = parse_config_or_exit(OnPolicyConfig, argv, PROG, description=__doc__)
    try:
        out, summary = make_onpolicy_data(cfg, command_line("vla_scripts/make_onpolicy_data.py"))
    except BadInputError as err:
        return report_bad_input(PROG, err)
    (cfg.output_dir / "onpolicy.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out}: {summary['episodes']} episodes, {summary['steps']} steps; the student succeeded in "
          f"{summary['student_successes']} while collecting; {summary['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
