"""Offline evaluation of a checkpoint's actions on recorded RLDS episodes under reduction settings
(``vla_scripts/eval_offline.py``).

:class:`EvalOfflineConfig` is the command's configuration; :func:`prepare` loads the model and the steps and checks
the action statistics key; :func:`run_eval_offline` evaluates every setting
(:func:`prismatic_tr.policy.offline.evaluate_offline`) and returns the records, their meta and the plot's title.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.cli import BadInputError, check_int_flag
from prismatic_tr.vla.settings import DEFAULT_MERGE_SIZE, SWEEP_METHODS


@dataclass
class EvalOfflineConfig:
    # fmt: off
    data_root_dir: Path = Path("datasets")  # holds <dataset_name>/<version>/ (tensorflow-datasets RLDS)
    dataset_name: str = "tabletop_pick"     # the dataset to read
    vla_path: str | None = None             # checkpoint directory (default: the bundled tabletop policy)
    split: str = "train"                    # tfds split
    max_samples: int = 256                  # steps evaluated (the first ones of the split)
    unnorm_key: str | None = None           # action statistics key (default: dataset_name)
    methods: list[str] = field(default_factory=lambda: list(SWEEP_METHODS))
    ratios: list[float] = field(default_factory=lambda: [0.5, 0.25, 0.1])
    spatial_merge_size: list[int] = field(default_factory=lambda: [DEFAULT_MERGE_SIZE])
    settings: list[str] = field(default_factory=list)  # further specs (vision / llm sites, combinations)
    batch_size: int = 16                    # steps per forward
    output_dir: Path = Path("outputs/eval_offline")
    num_threads: int = 0                    # torch threads (0: torch's default)
    progress: bool = True
    # fmt: on

    def __post_init__(self) -> None:
        from prismatic_tr.vla.spec import build_settings, parse_setting

        for name, low in (("max_samples", 1), ("batch_size", 1), ("num_threads", 0)):
            check_int_flag(name, getattr(self, name), low)
        self.data_root_dir, self.output_dir = Path(self.data_root_dir), Path(self.output_dir)
        if not (self.data_root_dir / self.dataset_name).is_dir():
            raise ValueError(f"--dataset_name {self.dataset_name!r}: no directory {self.data_root_dir / self.dataset_name}")
        if self.vla_path is not None and not (Path(self.vla_path) / "config.json").is_file():
            raise ValueError(f"--vla_path {self.vla_path!r} is not a checkpoint directory (no config.json)")
        settings = build_settings(self.methods, self.ratios, self.spatial_merge_size) if self.methods else \
            build_settings([], [1.0])
        self.setting_list = list(dict.fromkeys(settings + [parse_setting(s) for s in self.settings]))


def prepare(cfg: EvalOfflineConfig) -> tuple[Any, Any, str, list[dict[str, Any]], str]:
    """Model, processor, statistics key, the steps and the model's source; :class:`BadInputError` on bad
    input."""
    import torch  # noqa: F401  (torch before tensorflow)

    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.bundled import bundled_policy_dir
    from prismatic_tr.policy.offline import read_steps

    source = cfg.vla_path or str(bundled_policy_dir())
    key = cfg.unnorm_key or cfg.dataset_name
    try:
        vla, processor = load_vla(source, reference_api=True)
        stats = sorted(getattr(vla, "norm_stats", None) or {})
        if key not in stats:
            raise ValueError(f"the model has no action statistics for {key!r} (it has {stats}); pass --unnorm_key")
        steps = read_steps(str(cfg.data_root_dir), cfg.dataset_name, cfg.split, cfg.max_samples)
    except (OSError, ValueError) as err:
        raise BadInputError(str(err)) from None
    return vla, processor, key, steps, source


OFFLINE_COLUMNS = (
    ("setting", "setting", "{}"), ("tokens", "num_patches", "{}"), ("llm tokens", "llm_visual_tokens", "{}"),
    ("L1 to demo", "action_l1_to_demo", "{:.4f}"), ("L1 to unreduced", "action_l1_to_unreduced", "{:.4f}"),
    ("token agreement", "token_agreement", "{:.3f}"), ("samples", "samples", "{}"),
)


def run_eval_offline(cfg: EvalOfflineConfig, command: str) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """Every setting of ``cfg`` on the same steps: (records with ``tokens_kept``, meta for the results file, the
    plot's title). ``command``: the command line, kept in the meta."""
    from tqdm.auto import tqdm

    from prismatic_tr.policy.offline import evaluate_offline

    start = time.perf_counter()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    vla, processor, key, steps, source = prepare(cfg)
    bar = tqdm(total=len(cfg.setting_list), desc="settings", disable=not cfg.progress)
    records = evaluate_offline(vla, processor, cfg.setting_list, steps, key, cfg.batch_size,
                               on_setting=lambda _: bar.update())
    bar.close()
    meta = {"command": command, "model": source,
            "config": {f.name: str(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)},
            "wall_s": round(time.perf_counter() - start, 1)}
    for rec in records:
        rec["tokens_kept"] = rec["llm_visual_tokens"] / records[0]["num_patches"]
    return records, meta, f"{Path(source).name} on {cfg.dataset_name}/{cfg.split} ({len(steps)} steps)"
