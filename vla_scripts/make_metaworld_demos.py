"""Write MetaWorld's scripted-expert episodes (prismatic_tr.envs.metaworld) as an RLDS dataset in OFT's LIBERO layout.

    python vla_scripts/make_metaworld_demos.py --episodes_per_task 50 --output_dir datasets
    python vla_scripts/make_metaworld_demos.py --tasks pick-place-v3,reach-v3 --episodes_per_task 5 --image_size 128

Needs the metaworld extra (``pip install -e ".[all,metaworld]"``) and, to render on a CPU, ``libosmesa6``
(``METAWORLD=1 bash scripts/setup_env.sh`` installs both). Writes ``<output_dir>/<dataset_name>/1.0.0`` (cameras
``observation/image`` and ``observation/wrist_image``, ``observation/state``, 7-D ``action``) and ``demos.json``
beside it (config, per task: seeds tried, successes written, failed seeds skipped, episode lengths). Only
successful expert episodes are written. Bad flags, or an existing dataset without ``--overwrite true``, exit with
status 2 before any episode is run.
"""

from collections.abc import Sequence

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.cli import parse_config_or_exit, run_command
from prismatic_tr.envs.demos import DemoReport, run_demo_command
from prismatic_tr.envs.metaworld.demos import MetaWorldDemoConfig, make_metaworld_demos

PROG = "make_metaworld_demos.py"


def parse_config(args: Sequence[str] | None = None) -> MetaWorldDemoConfig:
    """Parse flags; on a bad value print ``make_metaworld_demos.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(MetaWorldDemoConfig, args, PROG)


def main(cfg: MetaWorldDemoConfig) -> DemoReport:
    """Check the output location (exit 2 if taken), run the experts, write and describe the dataset."""
    return run_demo_command(cfg, make_metaworld_demos, PROG, " (every task)")


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-make-metaworld-demos``): parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
