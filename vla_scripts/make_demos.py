"""Write scripted-expert episodes of the tabletop task (prismatic_tr.envs) as an RLDS dataset.

    python vla_scripts/make_demos.py --num_episodes 200 --output_dir datasets
    python vla_scripts/make_demos.py --num_episodes 500 --num_val_episodes 50 --motion_noise 0.2 --preview true

Writes ``<output_dir>/<dataset_name>/1.0.0`` (read by ``vla_scripts/finetune.py --data_root_dir <output_dir>
--dataset_name <dataset_name>``), ``demos.json`` beside it (config, seeds, expert success and episode lengths)
and with ``--preview true`` a ``preview.png``. Prints the expert's success rate, episode-length statistics and
the first seed no split used (evaluate from there for unseen layouts). Bad flags, or an existing dataset
without ``--overwrite true``, exit with status 2 before any episode is run.
"""

from collections.abc import Sequence

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.cli import parse_config_or_exit, run_command
from prismatic_tr.envs.demos import DemoConfig, DemoReport, make_demos, run_demo_command

PROG = "make_demos.py"


def parse_config(args: Sequence[str] | None = None) -> DemoConfig:
    """Parse flags; on a bad value print ``make_demos.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(DemoConfig, args, PROG)


def main(cfg: DemoConfig) -> DemoReport:
    """Check the output location (exit 2 if taken), run the expert, write and describe the dataset."""
    return run_demo_command(cfg, make_demos, PROG)


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-make-demos``): parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
