"""Offline evaluation on recorded episodes: what each reduction setting does to a checkpoint's actions on an RLDS
dataset (OpenVLA's layout: steps with an image, a language instruction and a 7-D action), on your own data.

    python vla_scripts/eval_offline.py --data_root_dir datasets --dataset_name bridge_orig --max_samples 256
    python vla_scripts/eval_offline.py --vla_path /path/to/openvla-7b --data_root_dir D --dataset_name N \\
        --methods topk_magnitude --ratios 0.5 0.25 --settings vision:attention:0.5@0.3

Default model: the bundled tabletop policy. Per setting (the unreduced baseline first) over the first
``--max_samples`` steps of ``--split``: method, reduction_ratio, num_patches, action_l1_to_demo,
action_l1_to_unreduced and token_agreement, in ``results.csv`` / ``results.json`` and a plot (``results.png``)
in ``--output_dir``. Images of any size are resized by the model's processor. A missing dataset or split, a
dataset without the needed keys, or a model without action statistics for ``--unnorm_key`` (default: the
dataset name) is an error in one line (exit 2) before anything is evaluated.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import dataclasses
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.cli import parse_config_or_exit

PROG = "eval_offline.py"


@dataclass
class EvalOfflineConfig:
    # fmt: off
    data_root_dir: Path = Path("datasets")  # holds <dataset_name>/<version>/ (tensorflow-datasets RLDS)
    dataset_name: str = "tabletop_pick"     # the dataset to read
    vla_path: str | None = None             # checkpoint directory (default: the bundled tabletop policy)
    split: str = "train"                    # tfds split
    max_samples: int = 256                  # steps evaluated (the first ones of the split)
    unnorm_key: str | None = None           # action statistics key (default: dataset_name)
    methods: list[str] = field(default_factory=lambda: ["topk_magnitude", "attention_score", "random", "spatial_pool"])
    ratios: list[float] = field(default_factory=lambda: [0.5, 0.25, 0.1])
    spatial_merge_size: list[int] = field(default_factory=lambda: [2])
    settings: list[str] = field(default_factory=list)  # further specs (vision / llm sites, combinations)
    batch_size: int = 16                    # steps per forward
    output_dir: Path = Path("outputs/eval_offline")
    num_threads: int = 0                    # torch threads (0: torch's default)
    progress: bool = True
    # fmt: on

    def __post_init__(self) -> None:
        from prismatic_tr.vla.spec import build_settings, parse_setting

        for name, low in (("max_samples", 1), ("batch_size", 1), ("num_threads", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"--{name} {value!r} is not allowed; use an integer >= {low}")
        self.data_root_dir, self.output_dir = Path(self.data_root_dir), Path(self.output_dir)
        if not (self.data_root_dir / self.dataset_name).is_dir():
            raise ValueError(f"--dataset_name {self.dataset_name!r}: no directory {self.data_root_dir / self.dataset_name}")
        if self.vla_path is not None and not (Path(self.vla_path) / "config.json").is_file():
            raise ValueError(f"--vla_path {self.vla_path!r} is not a checkpoint directory (no config.json)")
        settings = build_settings(self.methods, self.ratios, self.spatial_merge_size) if self.methods else \
            build_settings([], [1.0])
        self.setting_list = list(dict.fromkeys(settings + [parse_setting(s) for s in self.settings]))


def parse_config(args: Sequence[str] | None = None) -> EvalOfflineConfig:
    """Parse flags; on a bad value print ``eval_offline.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(EvalOfflineConfig, args, PROG, description=__doc__)


def prepare(cfg: EvalOfflineConfig) -> tuple[Any, Any, str, list[dict[str, Any]], str]:
    """Model, processor, statistics key, the steps and the model's source; one line and exit 2 on bad input."""
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
        print(f"{PROG}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    return vla, processor, key, steps, source


OFFLINE_COLUMNS = (
    ("setting", "setting", "{}"), ("tokens", "num_patches", "{}"), ("llm tokens", "llm_visual_tokens", "{}"),
    ("L1 to demo", "action_l1_to_demo", "{:.4f}"), ("L1 to unreduced", "action_l1_to_unreduced", "{:.4f}"),
    ("token agreement", "token_agreement", "{:.3f}"), ("samples", "samples", "{}"),
)


def main(cfg: EvalOfflineConfig) -> list[dict[str, Any]]:
    from tqdm.auto import tqdm

    from prismatic_tr.bench.vla.report import write_csv, write_json
    from prismatic_tr.policy.offline import evaluate_offline
    from prismatic_tr.policy.report import format_rows, plot_tradeoff

    start = time.perf_counter()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    vla, processor, key, steps, source = prepare(cfg)
    bar = tqdm(total=len(cfg.setting_list), desc="settings", disable=not cfg.progress)
    records = evaluate_offline(vla, processor, cfg.setting_list, steps, key, cfg.batch_size,
                               on_setting=lambda _: bar.update())
    bar.close()
    print(format_rows(records, OFFLINE_COLUMNS))
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    meta = {"command": " ".join(["python", "vla_scripts/eval_offline.py", *sys.argv[1:]]), "model": source,
            "config": {f.name: str(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)},
            "wall_s": round(time.perf_counter() - start, 1)}
    for rec in records:
        rec["tokens_kept"] = rec["llm_visual_tokens"] / records[0]["num_patches"]
    title = f"{Path(source).name} on {cfg.dataset_name}/{cfg.split} ({len(steps)} steps)"
    for path in (write_csv(records, cfg.output_dir / "results.csv"),
                 write_json(records, cfg.output_dir / "results.json", meta),
                 plot_tradeoff(records, cfg.output_dir / "results.png", title, x="tokens_kept", y="token_agreement")):
        print(f"wrote {path}")
    return records


if __name__ == "__main__":
    main(parse_config())
