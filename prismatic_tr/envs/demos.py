"""Expert demonstrations of the tabletop task written as an RLDS dataset that fine-tuning reads unchanged.

    from prismatic_tr.envs.demos import DemoConfig, make_demos
    report = make_demos(DemoConfig(num_episodes=200, output_dir=Path("datasets")))
    # -> datasets/tabletop_pick/1.0.0 (RLDS), datasets/tabletop_pick/demos.json (+ preview.png)
    # train: python vla_scripts/finetune.py --data_root_dir datasets --dataset_name tabletop_pick ...

Episode seeds: "train" uses ``seed, ..., seed + num_episodes - 1``, "val" the next ``num_val_episodes``; all of
them must lie in the "demonstrations" seed split (:mod:`prismatic_tr.envs.splits`: 0-499,999), so no
demonstration shares a layout with a validation or test episode. Seeds from ``report.first_unseen_seed`` on
were never written. Every
episode is written, failed ones too (their labels are still the expert's actions; ``episode_metadata``
says how each ended). ``motion_noise`` / ``gripper_noise`` perturb the executed actions only
(:class:`prismatic_tr.envs.ExecutionNoise`).
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import dataclasses
import json
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prismatic_tr.envs.env import make_episode
from prismatic_tr.envs.expert import ScriptedExpert
from prismatic_tr.envs.rollout import EpisodeResult, ExecutionNoise, rollout
from prismatic_tr.envs.scene import TaskConfig
from prismatic_tr.envs.spec import DEFAULT_MAX_STEPS, TASK_KINDS, TASK_VERSION
from prismatic_tr.envs.splits import DEMONSTRATIONS, check_seeds

VERSION = "1.0.0"
SUMMARY_FILENAME, PREVIEW_FILENAME = "demos.json", "preview.png"
PREVIEW_EPISODES, PREVIEW_FRAMES = 4, 5
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass
class DemoConfig:
    """Run the scripted expert of the tabletop task (prismatic_tr.envs) and write its episodes as an RLDS
    dataset for vla_scripts/finetune.py (--data_root_dir <output_dir> --dataset_name <dataset_name>)."""

    # fmt: off
    num_episodes: int = 200                 # "train" episodes (seeds seed ... seed + num_episodes - 1)
    num_val_episodes: int = 0               # "val" episodes (the next seeds); 0 = no val split
    seed: int = 0                           # first episode seed (all seeds in the demonstrations split, 0-499,999)
    output_dir: Path = Path("datasets")     # data_root_dir: writes <output_dir>/<dataset_name>/1.0.0
    dataset_name: str = "tabletop_pick"     # tfds dataset name (lower-case letters, digits, _)
    max_steps: int = DEFAULT_MAX_STEPS      # step limit of an episode
    min_objects: int = 3                    # objects per scene, uniform in [min_objects, max_objects]
    max_objects: int = 5                    # (at most 5 with distinct_attributes, else 6)
    kinds: list[str] = field(default_factory=lambda: list(TASK_KINDS))  # task kinds: pick, reach
    distinct_attributes: bool = True        # every object has its own colour and shape
    motion_noise: float = 0.0               # executed-motion noise std, fraction of the step limit (0-1)
    gripper_noise: float = 0.0              # chance per step of a stray close high above the table (0-1)
    third_person: bool = False              # also record the fixed third-person camera (OpenVLA-OFT-style data:
                                            #   observation/image third-person, observation/wrist_image eye-in-hand)
    preview: bool = False                   # also write <dataset dir>/preview.png (a few episodes' frames)
    overwrite: bool = False                 # replace an existing dataset of this name
    progress: bool = True                   # progress bar on stderr
    # fmt: on

    def __post_init__(self) -> None:
        check_dataset_flags(self, {"num_episodes": 1, "num_val_episodes": 0, "seed": 0})
        check_seeds(DEMONSTRATIONS, self.seed, self.num_episodes + self.num_val_episodes,
                    job=f"--seed {self.seed} with {self.num_episodes} + {self.num_val_episodes} episodes")
        self.task_config()
        ExecutionNoise(self.motion_noise, self.gripper_noise)  # validates both

    def task_config(self) -> TaskConfig:
        return TaskConfig(self.min_objects, self.max_objects, tuple(self.kinds), self.max_steps,
                          self.distinct_attributes)

    @property
    def dataset_dir(self) -> Path:
        return self.output_dir / self.dataset_name

    def split_seeds(self) -> dict[str, range]:
        """Episode seeds of each split written."""
        train = range(self.seed, self.seed + self.num_episodes)
        splits = {"train": train}
        if self.num_val_episodes:
            splits["val"] = range(train.stop, train.stop + self.num_val_episodes)
        return splits


def check_dataset_flags(cfg: Any, minimums: dict[str, int]) -> None:
    """Check a demonstration config's flags (ValueError naming the flag): each integer field in ``minimums`` at least
    its minimum, ``dataset_name`` a tfds name, ``output_dir`` not a file (made a Path)."""
    from prismatic_tr.cli import check_int_flag

    for name, low in minimums.items():
        check_int_flag(name, getattr(cfg, name), low)
    if not _NAME_RE.match(cfg.dataset_name):
        raise ValueError(f"--dataset_name {cfg.dataset_name!r} is not allowed; use lower-case letters, "
                         "digits and _ , starting with a letter")
    cfg.output_dir = Path(cfg.output_dir)
    if cfg.output_dir.exists() and not cfg.output_dir.is_dir():
        raise ValueError(f"--output_dir {str(cfg.output_dir)!r} exists and is not a directory")


@dataclass
class SplitSummary:
    """How the expert did on one split: seeds, outcomes, episode lengths (steps)."""

    split: str
    seeds: range
    outcomes: dict[str, int] = field(default_factory=dict)
    lengths: list[int] = field(default_factory=list)

    def add(self, result: EpisodeResult) -> None:
        self.outcomes[result.outcome] = self.outcomes.get(result.outcome, 0) + 1
        self.lengths.append(result.steps)

    @property
    def success_rate(self) -> float:
        return self.outcomes.get("success", 0) / max(len(self.lengths), 1)

    def as_dict(self) -> dict[str, Any]:
        lengths = np.asarray(self.lengths)
        return {
            "first_seed": self.seeds.start, "episodes": len(self.lengths), "transitions": int(lengths.sum()),
            "outcomes": dict(self.outcomes), "success_rate": self.success_rate,
            "length_mean": float(lengths.mean()), "length_median": float(np.median(lengths)),
            "length_min": int(lengths.min()), "length_max": int(lengths.max()),
        }

    def line(self) -> str:
        d = self.as_dict()
        return (f"{self.split}: expert success {d['outcomes'].get('success', 0)}/{d['episodes']} "
                f"({100 * d['success_rate']:.1f} %), episode length mean {d['length_mean']:.1f} "
                f"(median {d['length_median']:.0f}, min {d['length_min']}, max {d['length_max']}), "
                f"{d['transitions']} transitions")


@dataclass
class DemoReport:
    """Where the dataset went and how the expert did; ``first_unseen_seed`` starts the never-written seeds."""

    data_root_dir: Path
    dataset_name: str
    version_dir: Path
    splits: list[SplitSummary]
    first_unseen_seed: int
    summary_path: Path
    preview_path: Path | None = None


def expert_episode(seed: int, task: TaskConfig, motion_noise: float = 0.0, gripper_noise: float = 0.0,
                   third_person: bool = False) -> EpisodeResult:
    """The recorded expert episode ``seed`` (executed actions perturbed by the given noise; ``third_person``: the
    fixed overhead camera recorded too)."""
    env = make_episode(seed, task, third_person=third_person)
    noise = ExecutionNoise(motion_noise, gripper_noise, seed) if motion_noise or gripper_noise else None
    return rollout(env, ScriptedExpert().policy(env), record=True, perturb=noise)


def check_output(cfg: DemoConfig) -> None:
    """ValueError if the dataset exists and ``overwrite`` is off; with ``overwrite``, remove what we wrote."""
    ours = [cfg.dataset_dir / VERSION, cfg.dataset_dir / SUMMARY_FILENAME, cfg.dataset_dir / PREVIEW_FILENAME]
    existing = [p for p in ours if p.exists()]
    if existing and not cfg.overwrite:
        raise ValueError(f"dataset {str(cfg.dataset_dir)!r} already exists ({existing[0].name}); pass "
                         "--overwrite true to replace it, or another --dataset_name / --output_dir")
    for path in existing:
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def run_demo_command(cfg: Any, make: Callable[[Any], DemoReport], prog: str, unseen_note: str = "") -> DemoReport:
    """A demonstration command's body: check the output location (``prog: error: ...`` and exit 2 if taken), run
    ``make(cfg)``, print one line per split (or task), where the dataset went and which seeds it never drew."""
    from prismatic_tr.cli import EXIT_BAD_INPUT

    try:
        check_output(cfg)
    except ValueError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    report = make(cfg)
    for split in report.splits:
        print(split.line())
    print(f"wrote {report.version_dir} (--data_root_dir {report.data_root_dir} --dataset_name {report.dataset_name})")
    print(f"summary: {report.summary_path}" + (f" | preview: {report.preview_path}" if report.preview_path else ""))
    print(f"seeds >= {report.first_unseen_seed} are unseen by this dataset{unseen_note}")
    return report


def preview_image(results: list[EpisodeResult], frames: int = PREVIEW_FRAMES) -> Any:
    """PIL image: one row per episode (captioned), ``frames`` evenly spaced observations and the last image."""
    from PIL import Image, ImageDraw

    rows = []
    for r in results:
        pick = np.linspace(0, len(r.images) - 1, frames - 1).round().astype(int)
        strip = np.concatenate([r.images[i] for i in pick] + [r.final_image], axis=1)
        caption = Image.new("RGB", (strip.shape[1], 16), (255, 255, 255))
        ImageDraw.Draw(caption).text((4, 2), f'seed {r.seed}: "{r.instruction}" -> {r.outcome} in {r.steps} steps',
                                     fill=(0, 0, 0))
        rows += [np.asarray(caption), strip]
    return Image.fromarray(np.concatenate(rows, axis=0))


def make_demos(cfg: DemoConfig) -> DemoReport:
    """Run the expert on every split's seeds and write the RLDS dataset, ``demos.json`` (and the preview)."""
    from prismatic_tr.envs.rlds import write_episodes  # imports torch, then tensorflow

    check_output(cfg)
    task = cfg.task_config()
    summaries = {name: SplitSummary(name, seeds) for name, seeds in cfg.split_seeds().items()}
    previewed: list[EpisodeResult] = []

    def episodes(split: str) -> Iterator[EpisodeResult]:
        for seed in _progress(summaries[split].seeds, split, cfg.progress):
            result = expert_episode(seed, task, cfg.motion_noise, cfg.gripper_noise, cfg.third_person)
            summaries[split].add(result)
            if cfg.preview and split == "train" and len(previewed) < PREVIEW_EPISODES:
                previewed.append(result)
            yield result

    description = f"tabletop task v{TASK_VERSION}, scripted expert (prismatic_tr.envs); config: {_config_dict(cfg)}"
    version_dir = write_episodes(cfg.output_dir, cfg.dataset_name, {s: (lambda s=s: episodes(s)) for s in summaries},
                                 description, third_person=cfg.third_person)
    summary = {"task_version": TASK_VERSION, "config": _config_dict(cfg), "dataset_dir": str(version_dir),
               "first_unseen_seed": max(s.stop for s in cfg.split_seeds().values()),
               "splits": {name: s.as_dict() for name, s in summaries.items()}}
    summary_path = cfg.dataset_dir / SUMMARY_FILENAME
    summary_path.write_text(json.dumps(summary, indent=2))
    preview_path = None
    if previewed:
        preview_path = cfg.dataset_dir / PREVIEW_FILENAME
        preview_image(previewed).save(preview_path)
    return DemoReport(cfg.output_dir, cfg.dataset_name, version_dir, list(summaries.values()),
                      summary["first_unseen_seed"], summary_path, preview_path)


def _config_dict(cfg: DemoConfig) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(cfg).items()}


def _progress(seeds: range, split: str, enabled: bool) -> Any:
    if not enabled:
        return seeds
    from tqdm import tqdm

    return tqdm(seeds, desc=f"expert episodes ({split})", unit="ep", leave=False)
