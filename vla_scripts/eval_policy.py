"""Closed-loop evaluation in the tabletop task: success rate and end-to-end step time per reduction setting.

The policy (default: the bundled trained policy; ``--vla_path`` for another checkpoint on the same task) runs
``--episodes`` episodes of a seed split (``--split``, ``prismatic_tr.envs.splits``: "validation" by default, the
episodes that choose settings and stopping points; "test" for held-out reporting) unreduced and under every setting (``--methods`` x ``--ratios`` at the
projector, plus any ``--settings`` spec: ``vision:attention:0.25@0.3``, ``llm:attention:0.5@0.25``, combinations
joined with ``+``; see ``prismatic_tr.vla.spec``). The same seeds for every setting.

    python vla_scripts/eval_policy.py --episodes 100 --ratios 0.5 0.1
    python vla_scripts/eval_policy.py --methods topk_magnitude --ratios 0.25 --settings vision:attention:0.25@0.3
    python vla_scripts/eval_policy.py --split test --episodes 200 --methods "[]" --output_dir outputs/eval_test
        # the unreduced policy alone on the held-out test split
    python vla_scripts/eval_policy.py --adapter vision-learned-0.1-0.25 --split test --methods "[]" --settings own
        # a shipped adapter under the setting it was trained with (its learned scorer included)

Writes ``results.csv``, ``results.json`` and ``results.png`` (success against speedup) into ``--output_dir``
with the columns method, site, reduction_ratio, depth_fraction, num_patches, llm_visual_tokens, success_rate,
success_ci_low, success_ci_high (Wilson 95 %), episodes, mean_steps, outcome_success / _timeout / _wrong_object
(episodes per outcome), predict_action_ms (median at batch 1) and predict_action_speedup; the split and its
seeds are in the JSON's meta. Bad flags exit with status 2 before the model is loaded.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import dataclasses
import datetime
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from prismatic_tr.cli import parse_config_or_exit, run_command

PROG = "eval_policy.py"
OWN = "own"  # --settings own: the setting the checkpoint or adapter carries (a learned scorer included)
DEFAULT_METHODS = ["topk_magnitude", "attention_score", "random", "spatial_pool"]


@dataclass
class EvalPolicyConfig:
    # fmt: off
    vla_path: str | None = None             # checkpoint directory (default: the bundled tabletop policy)
    adapter: str | None = None              # a LoRA adapter merged into it first: a shipped name or a directory
                                            #   (prismatic_tr.policy.adapters; its setting is not attached)
    episodes: int = 100                     # episodes per setting
    split: str = "validation"               # seed split of the episodes (validation | test | ...; envs.splits)
    seed: int | None = None                 # first episode seed, inside the split (default: the split's first)
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))  # projector-site methods
    ratios: list[float] = field(default_factory=lambda: [0.5, 0.25, 0.1])      # fractions of tokens kept
    spatial_merge_size: list[int] = field(default_factory=lambda: [2])         # spatial_pool windows
    settings: list[str] = field(default_factory=list)  # further specs (vision / llm sites, combinations); "own":
                                            #   the setting --vla_path / --adapter carries
    unnorm_key: str | None = None           # action statistics key (default: the model's only one)
    min_objects: int = 3                    # task: objects per scene (the task's default, 3-5)
    max_objects: int = 5
    batch_size: int = 25                    # episodes run in lockstep
    execute_steps: int | None = None        # an OpenVLA-OFT policy: chunk actions run open loop per prediction
                                            #   (default: the whole chunk, OFT's rule)
    timing_runs: int = 10                   # predict_action timings per setting (interleaved, batch 1)
    output_dir: Path = Path("outputs/eval_policy")  # results.csv / .json / .png
    num_threads: int = 0                    # torch threads (0: torch's default)
    progress: bool = True                   # progress bar
    # fmt: on

    def __post_init__(self) -> None:
        from prismatic_tr.envs import TaskConfig
        from prismatic_tr.envs.splits import split_seeds
        from prismatic_tr.vla.spec import build_settings, parse_setting

        for name, low in (("episodes", 1), ("batch_size", 1), ("timing_runs", 1), ("num_threads", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"--{name} {value!r} is not allowed; use an integer >= {low}")
        if self.execute_steps is not None and (isinstance(self.execute_steps, bool) or
                                               not isinstance(self.execute_steps, int) or self.execute_steps < 1):
            raise ValueError(f"--execute_steps {self.execute_steps!r} is not allowed; use an integer >= 1 (at most "
                             "the policy's chunk) or omit it for the whole chunk")
        self.seeds = list(split_seeds(self.split, self.episodes, self.seed,
                                      job=f"--split {self.split} --seed {self.seed} --episodes {self.episodes}"))
        self.output_dir = Path(self.output_dir)
        if self.output_dir.is_file():
            raise ValueError(f"--output_dir {str(self.output_dir)!r} is a file; give a directory")
        self.task = TaskConfig(min_objects=self.min_objects, max_objects=self.max_objects)
        settings = build_settings(self.methods, self.ratios, self.spatial_merge_size) if self.methods else \
            build_settings([], [1.0])
        self.setting_list = list(dict.fromkeys(settings + [self._own_setting() if s.strip() == OWN else
                                                            parse_setting(s) for s in self.settings]))
        if self.vla_path is not None:
            path = Path(self.vla_path)
            if not (path / "config.json").is_file():
                raise ValueError(f"--vla_path {self.vla_path!r} is not a checkpoint directory (no config.json)")
        else:
            from prismatic_tr.policy.bundled import bundled_policy_dir

            bundled_policy_dir()
        if self.adapter is not None:
            from prismatic_tr.policy.adapters import adapter_dir

            adapter_dir(self.adapter)

    def _own_setting(self) -> Any:
        """``--settings own``: the setting ``--adapter`` (its token_reduction.json) or ``--vla_path`` (its config)
        carries; ValueError when neither is given or it carries none."""
        import json

        from prismatic_tr.vla import read_settings
        from prismatic_tr.vla.spec import setting_of

        if self.adapter is not None:
            from prismatic_tr.policy.adapters import read_adapter

            stored, source = read_adapter(self.adapter)[0], f"--adapter {self.adapter!r}"
        elif self.vla_path is not None and (Path(self.vla_path) / "config.json").is_file():
            config = json.loads((Path(self.vla_path) / "config.json").read_text())
            stored, source = config.get("token_reduction"), f"--vla_path {self.vla_path!r}"
        else:
            raise ValueError(f"--settings {OWN} needs --vla_path (a checkpoint directory) or --adapter")
        try:
            return setting_of(read_settings(SimpleNamespace(token_reduction=stored)))
        except ValueError as err:
            raise ValueError(f"--settings {OWN}: {source}: {err}") from None

    def to_meta(self) -> dict[str, Any]:
        return {f.name: (str(getattr(self, f.name)) if isinstance(getattr(self, f.name), Path) else getattr(self, f.name))
                for f in dataclasses.fields(self)}


def parse_config(args: Sequence[str] | None = None) -> EvalPolicyConfig:
    """Parse flags; on a bad value print ``eval_policy.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(EvalPolicyConfig, args, PROG, description=__doc__)


def load(cfg: EvalPolicyConfig) -> tuple[Any, Any, str, str]:
    """(vla, processor, unnorm_key, source); exit 2 with one line when the checkpoint cannot be used."""
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.bundled import UNNORM_KEY, bundled_policy_dir

    path = cfg.vla_path
    try:
        if cfg.adapter is not None:
            from prismatic_tr.policy.adapters import default_base, load_adapted_policy

            path = path or str(default_base(cfg.adapter))  # the bundled policy of the adapter's kind
            vla, processor = load_adapted_policy(cfg.adapter, base=path, apply_reduction=False)
            path = f"{path} + adapter {cfg.adapter}"
        else:
            path = path or str(bundled_policy_dir())
            vla, processor = load_vla(path)
        stats = sorted(getattr(vla, "norm_stats", None) or {})
        key = cfg.unnorm_key or (UNNORM_KEY if UNNORM_KEY in stats else (stats[0] if len(stats) == 1 else None))
        if key not in stats:
            raise ValueError(f"--unnorm_key {key!r} is not among the model's action statistics {stats}")
        chunk = vla.oft.num_actions_chunk if hasattr(vla, "oft") else 1
        if cfg.execute_steps is not None and cfg.execute_steps > chunk:
            raise ValueError(f"--execute_steps {cfg.execute_steps} is more than the policy's chunk of {chunk} "
                             "action(s)")
    except (OSError, ValueError) as err:
        print(f"{PROG}: error: cannot use {path!r}: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    return vla, processor, key, path


def main(cfg: EvalPolicyConfig) -> list[dict[str, Any]]:
    from tqdm.auto import tqdm

    from prismatic_tr.bench.vla.report import write_csv, write_json
    from prismatic_tr.policy.evaluate import evaluate_settings
    from prismatic_tr.policy.report import CLOSED_LOOP_COLUMNS, format_rows, plot_tradeoff

    start = time.perf_counter()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    vla, processor, key, source = load(cfg)
    seeds = cfg.seeds
    bar = tqdm(total=len(seeds) * len(cfg.setting_list), desc="episodes", disable=not cfg.progress)
    records = evaluate_settings(vla, processor, cfg.setting_list, seeds, key, cfg.task, cfg.batch_size,
                                cfg.timing_runs, on_episode=lambda label, o: bar.update(),
                                execute_steps=cfg.execute_steps)
    bar.close()
    print(format_rows(records, CLOSED_LOOP_COLUMNS))
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    meta = {"command": " ".join(["python", "vla_scripts/eval_policy.py", *sys.argv[1:]]), "model": source,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            "torch_threads": torch.get_num_threads(), "config": cfg.to_meta(), "split": cfg.split,
            "seeds": [seeds[0], seeds[-1]], "wall_s": round(time.perf_counter() - start, 1)}
    title = f"{Path(source).name}: {cfg.episodes} {cfg.split} episodes per setting (seeds {seeds[0]}-{seeds[-1]})"
    for path in (write_csv(records, cfg.output_dir / "results.csv"),
                 write_json(records, cfg.output_dir / "results.json", meta),
                 plot_tradeoff(records, cfg.output_dir / "results.png", title)):
        print(f"wrote {path}")
    return records


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-eval-policy``): parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
