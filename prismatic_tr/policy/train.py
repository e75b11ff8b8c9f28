"""The recipe of the bundled policy: expert demonstrations -> a random ``policy``-preset OpenVLA -> full
fine-tuning with the package's own trainer -> closed-loop evaluation on unseen episodes -> (optionally) the
package's assets. Every step is the library's (``envs.demos``, ``models.build_vla``, ``training.finetune``,
``policy.closed_loop``); this module only wires them and writes what it did.

Output directory layout::

    data/<dataset>/1.0.0            the demonstrations (RLDS)
    init/                           the random-weight starting checkpoint
    runs/<exp_id>/checkpoints/latest  the trained checkpoint (OpenVLA layout)
    training_curve.csv              loss / action accuracy / action L1 / lr per optimizer step
    evaluation.json                 closed-loop success on unseen seeds (Wilson 95 % interval)
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import csv
import dataclasses
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.policy.bundled import UNNORM_KEY as DATASET

UNSEEN_SEED_OFFSET = 1_000_000  # evaluation seeds start here: far from every demonstration seed


@dataclass
class PolicyTrainConfig:
    """Train the bundled tabletop policy from scratch on CPU (see prismatic_tr.policy.train)."""

    # fmt: off
    output_dir: Path = Path("outputs/policy")  # data/, init/, runs/, training_curve.csv, evaluation.json
    num_episodes: int = 2000                   # expert demonstrations (seeds demo_seed ...)
    demo_seed: int = 0                         # first demonstration seed
    motion_noise: float = 0.2                  # executed-motion noise of the demonstrations (DART-style)
    demo_min_objects: int = 1                  # objects per demonstration scene, uniform in [min, max]; fewer
    demo_max_objects: int = 5                  #   than the task's 3-5 give easy scenes that teach finding objects
    data_root: Path | None = None              # demonstrations written before (default: <output_dir>/data, written
                                               #   there when missing)
    init_checkpoint: Path | None = None        # fine-tune this checkpoint (an earlier run's) instead of a new
                                               #   model: preset and tower pretraining are then not used
    preset: str = "policy"                     # model size (prismatic_tr.models.PRESETS)
    vision_pretrain_steps: int = 0             # supervised tower pretraining on rendered frames first (0 = none;
                                               #   prismatic_tr.policy.vision_pretrain), batch batch_size
    freeze_vision: bool = False                # fine-tune projector and Llama only (the towers keep their
                                               #   pretrained weights; ~35 % less time per step)
    grounding_loss_weight: float = 0.0         # training-only loss: the instruction's colour word predicts the
                                               #   expert's (dx, dy) (prismatic_tr.policy.grounding); 0 = off
    seed: int = 0                              # weights and data order
    max_steps: int = 4000                      # optimizer steps
    batch_size: int = 32                       # examples per step
    learning_rate: float = 3e-4                # AdamW, cosine to 10 % after the warm-up
    lr_warmup_steps: int = 200                 # linear warm-up
    save_steps: int | None = None              # checkpoint interval (overwrites checkpoints/latest); None = at the end
    bf16_autocast: bool = True                 # bf16 autocast on the CPU (AMX: ~3x faster matmuls)
    eval_episodes: int = 200                   # closed-loop episodes on unseen seeds
    eval_batch_size: int = 25                  # episodes run in lockstep
    install_dir: Path | None = None            # copy the trained checkpoint and its records here
    progress: bool = True                      # progress bars
    # fmt: on

    def __post_init__(self) -> None:
        from prismatic_tr.models.config import PRESETS

        self.output_dir = Path(self.output_dir)
        if self.data_root is not None:
            self.data_root = Path(self.data_root)
            if not (self.data_root / DATASET / "demos.json").is_file():
                raise ValueError(f"--data_root {str(self.data_root)!r} holds no {DATASET} demonstrations "
                                 f"({DATASET}/demos.json); omit it to write them into <output_dir>/data")
        if self.init_checkpoint is not None:
            self.init_checkpoint = Path(self.init_checkpoint)
            if not (self.init_checkpoint / "config.json").is_file():
                raise ValueError(f"--init_checkpoint {str(self.init_checkpoint)!r} is not a checkpoint directory "
                                 "(no config.json)")
        for name in ("num_episodes", "max_steps", "batch_size", "eval_episodes", "eval_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name} {value!r} is not allowed; use an integer >= 1")
        if self.preset not in PRESETS:
            raise ValueError(f"--preset {self.preset!r} is not allowed; choose one of {sorted(PRESETS)}")
        if isinstance(self.vision_pretrain_steps, bool) or self.vision_pretrain_steps < 0:
            raise ValueError(f"--vision_pretrain_steps {self.vision_pretrain_steps!r} is not allowed; use an integer >= 0")
        if self.save_steps is not None and (isinstance(self.save_steps, bool) or self.save_steps < 1):
            raise ValueError(f"--save_steps {self.save_steps!r} is not allowed; use an integer >= 1 or omit it")
        if not 1 <= self.demo_min_objects <= self.demo_max_objects <= 5:
            raise ValueError(f"--demo_min_objects {self.demo_min_objects} / --demo_max_objects {self.demo_max_objects} "
                             "are not allowed; need 1 <= min <= max <= 5")
        if not self.grounding_loss_weight >= 0.0:
            raise ValueError(f"--grounding_loss_weight {self.grounding_loss_weight!r} is not allowed; use a number >= 0")
        if not 0.0 <= self.motion_noise <= 1.0:
            raise ValueError(f"--motion_noise {self.motion_noise} is not allowed; use a number in [0, 1]")


def ensure_demos(cfg: PolicyTrainConfig) -> Path:
    """Write the demonstrations once (unless ``cfg.data_root`` names them); returns the data root."""
    from prismatic_tr.envs.demos import DemoConfig, make_demos

    if cfg.data_root is not None:
        return cfg.data_root

    root = cfg.output_dir / "data"
    if not (root / DATASET / "demos.json").is_file():
        make_demos(DemoConfig(num_episodes=cfg.num_episodes, seed=cfg.demo_seed, output_dir=root,
                              dataset_name=DATASET, motion_noise=cfg.motion_noise, min_objects=cfg.demo_min_objects,
                              max_objects=cfg.demo_max_objects, progress=cfg.progress))
    return root


def write_initial_checkpoint(cfg: PolicyTrainConfig) -> Path:
    """A random-weight model of ``cfg.preset`` with its processor, no action statistics (training adds them).

    The towers' patch position embeddings start as fixed 2-D sine-cosine tables (MAE's initialisation, trained
    from there): where a patch is must be readable for a policy trained from scratch on a few thousand episodes.
    With ``vision_pretrain_steps`` the towers are then pretrained on rendered frames (the curve goes to
    ``vision_pretrain_curve.csv``).
    """
    from prismatic_tr.models import build_processor, build_vla
    from prismatic_tr.models.init_utils import init_sincos_pos_embed_

    out = cfg.output_dir / "init"
    vla = build_vla(cfg.preset, seed=cfg.seed)
    init_sincos_pos_embed_(vla.vision_backbone.towers)
    processor = build_processor(vla.config, task_words=True)  # colour and shape words as whole tokens
    if cfg.vision_pretrain_steps:
        from prismatic_tr.policy.vision_pretrain import VisionPretrainConfig, pretrain_vision

        history = pretrain_vision(vla, processor, VisionPretrainConfig(
            steps=cfg.vision_pretrain_steps, batch_size=cfg.batch_size, seed=cfg.seed,
            min_objects=cfg.demo_min_objects, max_objects=cfg.demo_max_objects),
            log=lambda row: logging.getLogger("prismatic_tr.training").info(
                "vision pretraining " + "  ".join(f"{k} {v:.3g}" for k, v in row.items())))
        write_curve(history, cfg.output_dir / "vision_pretrain_curve.csv",
                    ["step", "loss", "color_acc_on_objects", "shape_acc_on_objects", "offset_error_cm", "step_time_s"])
    vla.norm_stats, vla.config.norm_stats = {}, None
    vla.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def train(cfg: PolicyTrainConfig, data_root: Path, init: Path) -> Any:
    """Full fine-tuning (no LoRA) of the initial checkpoint on the demonstrations (with the grounding loss when
    ``cfg.grounding_loss_weight`` > 0)."""
    from prismatic_tr.training import FinetuneConfig, finetune
    from prismatic_tr.training.distributed import init_distributed
    from prismatic_tr.training.loop import prepare, run

    ft = FinetuneConfig(
        vla_path=str(init), data_root_dir=data_root, dataset_name=DATASET, run_root_dir=cfg.output_dir / "runs",
        batch_size=cfg.batch_size, max_steps=cfg.max_steps, save_steps=cfg.save_steps or cfg.max_steps, learning_rate=cfg.learning_rate,
        lr_schedule="cosine", lr_warmup_steps=cfg.lr_warmup_steps, bf16_autocast=cfg.bf16_autocast,
        use_lora=False, freeze_vision_backbone=cfg.freeze_vision, shuffle_buffer_size=50_000, seed=cfg.seed, log_every=50, progress_bar=cfg.progress,
    )
    if not cfg.grounding_loss_weight:
        return finetune(ft)
    from prismatic_tr.policy.grounding import GroundingLoss, color_word_ids

    session = prepare(ft, init_distributed())
    aux = GroundingLoss(session.vla.config.text_config.hidden_size, color_word_ids(session.processor.tokenizer),
                        session.action_tokenizer, weight=cfg.grounding_loss_weight)
    session.optimizer.add_param_group({"params": list(aux.parameters())})
    return run(session, aux_loss=aux)


CURVE_KEYS = ["step", "loss", "action_accuracy", "action_l1", "lr", "step_time_s"]


def write_curve(history: list[dict[str, float]], path: Path, keys: list[str] = CURVE_KEYS) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(history)


def evaluate(cfg: PolicyTrainConfig, checkpoint: Path) -> dict[str, Any]:
    """Closed-loop success of the checkpoint on ``eval_episodes`` unseen seeds."""
    from tqdm.auto import tqdm

    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.closed_loop import SuccessSummary, run_episodes

    vla, processor = load_vla(checkpoint)
    seeds = list(range(UNSEEN_SEED_OFFSET, UNSEEN_SEED_OFFSET + cfg.eval_episodes))
    bar = tqdm(total=len(seeds), desc="closed-loop eval", disable=not cfg.progress)
    start = time.perf_counter()
    outcomes = run_episodes(vla, processor, seeds, DATASET, batch_size=cfg.eval_batch_size,
                            on_episode=lambda _: bar.update())
    bar.close()
    summary = SuccessSummary.of(outcomes)
    return {**dataclasses.asdict(summary), "seeds": [seeds[0], seeds[-1]], "wall_s": time.perf_counter() - start,
            "outcomes": {o: sum(e.outcome == o for e in outcomes) for o in sorted({e.outcome for e in outcomes})}}


def install(checkpoint: Path, records: list[Path], target: Path) -> Path:
    """Copy the checkpoint's model, processor and statistics files, and the records, into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for f in sorted(checkpoint.iterdir()):
        if f.is_file() and f.name != "trainer_state.pt":
            shutil.copy2(f, target / f.name)
    for r in records:
        shutil.copy2(r, target / r.name)
    return target


def run_recipe(cfg: PolicyTrainConfig) -> dict[str, Any]:
    """The whole recipe; returns (and writes to ``evaluation.json``) what it measured."""
    torch.manual_seed(cfg.seed)
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    data_root = ensure_demos(cfg)
    t_demos = time.perf_counter()
    init = cfg.init_checkpoint if cfg.init_checkpoint is not None else write_initial_checkpoint(cfg)
    result = train(cfg, data_root, init)
    t_train = time.perf_counter()
    write_curve(result.history, cfg.output_dir / "training_curve.csv",
                CURVE_KEYS + (["aux_loss"] if cfg.grounding_loss_weight else []))
    evaluation = evaluate(cfg, result.last_checkpoint)
    record = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(cfg).items()},
              "checkpoint": str(result.last_checkpoint), "evaluation": evaluation,
              "minutes": {"demonstrations": (t_demos - t0) / 60, "training": (t_train - t_demos) / 60,
                          "evaluation": evaluation["wall_s"] / 60},
              "torch_threads": torch.get_num_threads()}
    (cfg.output_dir / "evaluation.json").write_text(json.dumps(record, indent=2) + "\n")
    if cfg.install_dir is not None:
        demos = data_root / DATASET / "demos.json"
        install(result.last_checkpoint, [cfg.output_dir / "training_curve.csv", cfg.output_dir / "evaluation.json",
                                         demos], Path(cfg.install_dir))
    return record
