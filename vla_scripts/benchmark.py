"""Benchmark one OpenVLA control step with and without visual token reduction: speed beside success.

With no arguments (the main job, under 10 minutes on 2 CPU cores): builds the reference OpenVLA-architecture model
(preset ``cpu-bench`` on a CPU: the real DINOv2-L + SigLIP-so400m towers and a Llama 2048 wide and 8 layers deep,
~1/16 of Llama-2-7B; ``openvla-7b`` on a GPU; random weights; ``--dtype auto``: bfloat16 where the device computes
it in hardware, else float32, and the results say which and why) and times ``predict_action`` end to end,
unreduced and under the settings of ``MAIN_SETTINGS``, interleaved; then the bundled trained tabletop policy
runs ``--policy_episodes`` closed-loop episodes of the held-out **test** split under every setting (success with
its Wilson interval, action error) and ``--validation_episodes`` of the **validation** split, on which the best
setting within 2 points of unreduced success is chosen (only among rows faster than unreduced end to end and not
flagged noisy; otherwise none; prismatic_tr.bench.vla.selection). Each shipped adapter (``--adapters``) runs the
same episodes under its own setting, beside that setting training-free; its LoRA is merged, so its speed is its
setting's (copied, not timed twice). Speed is the cpu-bench model's, success the bundled policy's: settings are
fractions of tokens and of depth, applied to each model (the block each cuts after is in the ``cut`` column).
Prints a table and writes ``results.csv``, ``results.json`` (with the CPU model and features), ``results.png`` and
``tradeoff.png`` into ``--output_dir``. One progress bar covers the whole job, with an estimate of the time left.
``python -m tools.report`` then writes the README tables from the committed files.

``--full true`` runs the full sweep instead: every projector method x ``--ratios`` (``spatial_pool`` at merge
sizes 2 and 4), every site setting of ``FULL_SITE_SETTINGS``, each beside its v0.2 ``:compact`` numbering where
that differs, 100 episodes per setting and 10 timed rounds (about an hour on 2 cores). Any of ``--methods``,
``--ratios``, ``--settings``, ``--policy_episodes``, ``--num_runs``, ``--warmup`` given on the command line
overrides the profile's value.

    python vla_scripts/benchmark.py                   # or: prismatic-tr-benchmark
    python vla_scripts/benchmark.py --full true
    python vla_scripts/benchmark.py --preset tiny --num_runs 3 --policy_episodes 0
    python vla_scripts/benchmark.py --methods topk_magnitude random --ratios 0.5 --vla_path /path/to/ckpt
    python vla_scripts/benchmark.py --preset cpu-bench-oft --methods "[]" --settings "[vision:diverse:0.1@0.25]"

``--preset cpu-bench-oft`` (or ``tiny-oft``, or an OpenVLA-OFT checkpoint at ``--vla_path``) times OpenVLA-OFT: two
224 px images and a proprio state per step (sizes from the model's config), one parallel pass for a chunk of 8 x 7
actions, the L1 head; phases vision, reducer, projector (+ proprio), llm (the one pass), head. Every site runs there
(the llm site drops visual tokens inside the one pass); there are no policy success columns, as there is no
OpenVLA-OFT policy yet (the output says so).

With ``--vla_path`` the rows describe that checkpoint only: the bundled policy's success is added only when the
checkpoint is the bundled policy itself (measure your own model's success with ``eval_offline.py``).

List flags take ``--ratios 0.75 0.5``, ``--ratios 0.75,0.5`` or ``--ratios "[0.75,0.5]"``. Bad flags exit
with status 2 before any model is built. Rows whose timings the machine disturbed (the vision phase, the
same work in every row, departs from the baseline's, or a row's runs spread too far; see
prismatic_tr.bench.measure.noise) are flagged ``noise_flag`` and warned about; with ``--strict`` such a run
exits with status 3.
"""

from __future__ import annotations

from collections.abc import Sequence

from prismatic_tr.bench.vla.config import BenchmarkConfig
from prismatic_tr.bench.vla.job import run_benchmark
from prismatic_tr.cli import parse_config_or_exit, run_command


def parse_config(args: Sequence[str] | None = None) -> BenchmarkConfig:
    """Parse flags; on a bad value print ``benchmark.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(BenchmarkConfig, args, "benchmark.py", description=__doc__)


def main(cfg: BenchmarkConfig) -> list[dict]:
    """Run the job of a parsed config; returns its records."""
    return run_benchmark(cfg)


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-benchmark``): parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
