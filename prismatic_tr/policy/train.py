"""The recipe of the bundled policy, one command from nothing (``vla_scripts/train_policy.py``):

expert demonstrations -> a random ``policy``-preset OpenVLA with tower pretraining -> fine-tuning stage 1 (action
and grounding loss) -> stage 2 (from stage 1's checkpoint) -> the best of stage 2's checkpoints on validation
episodes -> closed-loop evaluation on the validation and the test seed split -> (optionally) the package's
assets. Its defaults (:mod:`prismatic_tr.policy.recipe_config`) follow runs 5 and 6 of
``benchmarks/results/policy_training/README.md``: each stage is trained with a cosine schedule over its
``max_steps`` and stopped after its ``stop_at_step``, and stage 2 starts in the state a separate
``--init_checkpoint`` command had (:func:`train_stage`). Every step is the library's (``envs.demos``,
``models.build_vla``, ``policy.vision_pretrain``, ``training``, ``policy.closed_loop``); this module wires them
and writes what it did.

Output directory layout::

    data/tabletop_pick/1.0.0, demos.json         the demonstrations (RLDS) and their summary
    init/                                        the random-weight model, towers pretrained (stage 1 starts here)
    vision_pretrain_curve.csv                    tower pretraining, every 50 steps
    runs/<exp_id>+stage1/checkpoints/step_N      stage 1's checkpoint at its last step (stage 2 starts here)
    runs/<exp_id>+stage2/checkpoints/step_N      stage 2's, every save_steps: the candidates; the policy is the one
                                                 with the most successes on select_episodes validation episodes
    training_curve_stage1.csv, _stage2.csv       loss / action accuracy / action L1 / lr (/ aux_loss) per step
    evaluation.json                              settings, demonstrations, stages, success per seed split

Validation success is what stopping and tuning decisions may read; test success is reported only.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import csv
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.bench.measure.devices import cpu_info
from prismatic_tr.envs.splits import TEST, VALIDATION, split_ranges, split_seeds
from prismatic_tr.policy.checkpoint_choice import checkpoints_in
from prismatic_tr.policy.checkpoint_choice import choose_checkpoint as choose
from prismatic_tr.policy.recipe_config import DATASET, PolicyTrainConfig, StageConfig, StageSpec

__all__ = ["DATASET", "PolicyTrainConfig", "StageConfig", "choose_checkpoint", "evaluate", "install", "run_recipe",
           "summary_lines", "train_stage", "write_curve"]

logger = logging.getLogger("prismatic_tr.training")
CURVE_KEYS = ["step", "loss", "action_accuracy", "action_l1", "lr", "step_time_s"]
PRETRAIN_CURVE_KEYS = ["step", "loss", "color_acc_on_objects", "shape_acc_on_objects", "offset_error_cm",
                       "step_time_s"]
PRETRAIN_CURVE = "vision_pretrain_curve.csv"


def curve_name(stage: str) -> str:
    return f"training_curve_{stage}.csv"


def ensure_demos(cfg: Any, dataset: str = DATASET, third_person: bool = False) -> Path:
    """Write the demonstrations once (unless ``cfg.data_root`` names them); returns the data root. ``cfg``: a
    recipe's config (its demonstration flags, :data:`~prismatic_tr.policy.recipe_config.DEMO_FIELDS`);
    ``third_person``: both cameras and the state, in OFT's layout (the OFT recipe)."""
    from prismatic_tr.envs.demos import DemoConfig, make_demos

    if cfg.data_root is not None:
        return cfg.data_root

    root = cfg.output_dir / "data"
    if not (root / dataset / "demos.json").is_file():
        make_demos(DemoConfig(num_episodes=cfg.num_episodes, seed=cfg.demo_seed, output_dir=root,
                              dataset_name=dataset, motion_noise=cfg.motion_noise, min_objects=cfg.demo_min_objects,
                              max_objects=cfg.demo_max_objects, third_person=third_person, progress=cfg.progress))
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
        from prismatic_tr.policy.vision_pretrain import pretrain_vision

        history = pretrain_vision(vla, processor, cfg.vision_pretrain_config(), log=lambda row: logger.info(
            "vision pretraining " + "  ".join(f"{k} {v:.3g}" for k, v in row.items())))
        write_curve(history, cfg.output_dir / PRETRAIN_CURVE, PRETRAIN_CURVE_KEYS)
    vla.norm_stats, vla.config.norm_stats = {}, None
    vla.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def train_stage(cfg: PolicyTrainConfig, name: str, stage: StageSpec, data_root: Path, init: Path) -> Any:
    """Full fine-tuning (no LoRA) of the checkpoint ``init`` for one stage; returns the ``TrainResult``.

    The stage starts in the state a separate ``train_policy.py --init_checkpoint <init>`` command had: torch
    seeded with ``stage.seed``, the weights loaded from disk, a new AdamW (no optimizer state carried over), the
    grounding head (``stage.grounding_loss_weight`` > 0) drawn after the model is loaded, and the data order drawn
    from ``stage.seed``. It runs until ``stage.stop_at_step`` (else ``max_steps``) with the learning rate of the
    cosine schedule over ``max_steps``, and saves ``checkpoints/step_<last step>``.
    """
    from prismatic_tr.training import FinetuneConfig, finetune
    from prismatic_tr.training.distributed import init_distributed
    from prismatic_tr.training.loop import prepare, run

    torch.manual_seed(stage.seed)
    ft = FinetuneConfig(
        vla_path=str(init), data_root_dir=data_root, dataset_name=DATASET, run_root_dir=cfg.output_dir / "runs",
        batch_size=cfg.batch_size, max_steps=stage.max_steps, stop_at_step=stage.stop_at_step,
        save_steps=stage.save_steps or stage.stop_at_step or stage.max_steps, save_latest_checkpoint_only=False,
        learning_rate=stage.learning_rate, lr_schedule="cosine", lr_warmup_steps=stage.lr_warmup_steps,
        bf16_autocast=cfg.autocast(), use_lora=False, freeze_vision_backbone=cfg.freeze_vision,
        shuffle_buffer_size=50_000, seed=stage.seed, log_every=50, progress_bar=cfg.progress, run_id_note=name,
    )
    if not stage.grounding_loss_weight:
        return finetune(ft)
    from prismatic_tr.policy.grounding import GroundingLoss, color_word_ids

    session = prepare(ft, init_distributed())
    aux = GroundingLoss(session.vla.config.text_config.hidden_size, color_word_ids(session.processor.tokenizer),
                        session.action_tokenizer, weight=stage.grounding_loss_weight)
    session.optimizer.add_param_group({"params": list(aux.parameters())})
    return run(session, aux_loss=aux)


def run_stages(cfg: PolicyTrainConfig, data_root: Path, init: Path) -> list[dict[str, Any]]:
    """Every stage in turn, each from the previous one's checkpoint; one record per stage (its curve written)."""
    records = []
    for name, stage in cfg.stages():
        start = time.perf_counter()
        result = train_stage(cfg, name, stage, data_root, init)
        minutes = (time.perf_counter() - start) / 60
        write_curve(result.history, cfg.output_dir / curve_name(name),
                    CURVE_KEYS + (["aux_loss"] if stage.grounding_loss_weight else []))
        last = result.history[-1]
        records.append({
            "stage": name, "init": str(init), "checkpoint": str(result.last_checkpoint),
            "max_steps": stage.max_steps, "stop_at_step": stage.stop_at_step, "last_step": int(last["step"]),
            "steps_run": len(result.history), "learning_rate": stage.learning_rate,
            "lr_warmup_steps": stage.lr_warmup_steps, "lr_at_last_step": last["lr"], "seed": stage.seed,
            "grounding_loss_weight": stage.grounding_loss_weight, "curve": curve_name(name), "minutes": minutes})
        init = result.last_checkpoint
    return records


def summary_lines(record: dict[str, Any]) -> str:
    """A recipe's record (``evaluation.json``) in lines for the terminal: success per split with its interval and
    outcomes, then the minutes per stage."""
    lines = [f"closed-loop success on {ev['episodes']} {split} episodes (seeds {ev['seeds'][0]:,}-{ev['seeds'][1]:,}): "
             f"{ev['success_rate']:.1%} (95 % CI {ev['success_ci_low']:.1%} - {ev['success_ci_high']:.1%}), "
             f"mean {ev['mean_steps']:.1f} steps, outcomes {ev['outcomes']}" for split, ev in record["evaluation"].items()]
    return "\n".join([*lines, "minutes: " + ", ".join(f"{k} {v:.1f}" for k, v in record["minutes"].items())])


def run_and_report(run: Callable[[Any], dict[str, Any]], summarize: Callable[[dict[str, Any]], str],
                   cfg: Any) -> dict[str, Any]:
    """A recipe command's body: log at INFO (absl at WARNING), ``run(cfg)``, print ``summarize(record)`` and the
    chosen checkpoint; the record."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("absl").setLevel(logging.WARNING)
    record = run(cfg)
    print(summarize(record))
    print(f"policy: {record['checkpoint']}")
    return record


def write_curve(history: list[dict[str, float]], path: Path, keys: list[str] = CURVE_KEYS) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(history)


def evaluate(checkpoint: Path, split: str, episodes: int, batch_size: int = 25,
             progress: bool = False) -> dict[str, Any]:
    """Closed-loop success of the checkpoint on the first ``episodes`` seeds of the seed ``split``
    (:func:`prismatic_tr.policy.closed_loop.evaluation_record`, plus ``wall_s``)."""
    from tqdm.auto import tqdm

    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.closed_loop import evaluation_record, run_episodes

    seeds = list(split_seeds(split, episodes))
    vla, processor = load_vla(checkpoint)
    bar = tqdm(total=len(seeds), desc=f"closed loop ({split})", disable=not progress)
    start = time.perf_counter()
    outcomes = run_episodes(vla, processor, seeds, DATASET, batch_size=batch_size, on_episode=lambda _: bar.update())
    bar.close()
    return {**evaluation_record(outcomes, split), "wall_s": time.perf_counter() - start}


def choose_checkpoint(cfg: PolicyTrainConfig, last: Path) -> tuple[Path, dict[str, Any]]:
    """The policy: of the last stage's saved checkpoints, the one with the most successes on the first
    ``cfg.select_episodes`` validation episodes (ties: the later step, which trained longer;
    :mod:`prismatic_tr.policy.checkpoint_choice`); ``last`` itself when ``select_episodes`` is 0 or it is the only
    one. Returns it and the record of every candidate.

    Closed-loop success of this policy moves by tens of points between checkpoints a few hundred steps apart
    while the training loss stays flat (benchmarks/results/policy_training/remake_diagnosis.md), so a fixed stop
    step chosen by hand for one run does not carry over to another: the command chooses on validation episodes.
    """
    candidates = checkpoints_in(last.parent)
    if cfg.select_episodes == 0 or len(candidates) <= 1:
        candidates = {0: last}

    def score(path: Path) -> dict[str, Any]:
        rec = evaluate(path, VALIDATION, cfg.select_episodes, cfg.eval_batch_size, cfg.progress)
        logger.info("selection: %s %d/%d validation episodes", path.name, rec["successes"], cfg.select_episodes)
        return {"successes": rec["successes"], "success_rate": rec["success_rate"]}

    return choose(candidates, cfg.select_episodes, score)


def install(checkpoint: Path, records: list[Path], target: Path) -> Path:
    """Copy the checkpoint's model, processor and statistics files, and the records, into ``target`` (curves of
    an earlier install there are removed first, so every record in ``target`` is this run's)."""
    target.mkdir(parents=True, exist_ok=True)
    for old in [*target.glob("training_curve*.csv"), *target.glob(PRETRAIN_CURVE)]:
        old.unlink()
    for f in sorted(checkpoint.iterdir()):
        if f.is_file() and f.name != "trainer_state.pt":
            shutil.copy2(f, target / f.name)
    for r in records:
        shutil.copy2(r, target / r.name)
    return target


def run_recipe(cfg: PolicyTrainConfig) -> dict[str, Any]:
    """The whole recipe; returns (and writes to ``evaluation.json``) what it did and measured."""
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    data_root = ensure_demos(cfg)
    t_demos = time.perf_counter()
    torch.manual_seed(cfg.seed)
    init = cfg.init_checkpoint if cfg.init_checkpoint is not None else write_initial_checkpoint(cfg)
    t_init = time.perf_counter()
    stages = run_stages(cfg, data_root, init)
    t_stages = time.perf_counter()
    checkpoint, selection = choose_checkpoint(cfg, Path(stages[-1]["checkpoint"]))
    t_select = time.perf_counter()
    evaluation = {split: evaluate(checkpoint, split, n, cfg.eval_batch_size, cfg.progress)
                  for split, n in ((VALIDATION, cfg.eval_episodes), (TEST, cfg.test_episodes))}
    demos = data_root / DATASET / "demos.json"
    pretrained = cfg.init_checkpoint is None and cfg.vision_pretrain_steps > 0
    record = {
        "recipe": "prismatic_tr.policy.train.run_recipe (vla_scripts/train_policy.py)",
        "config": cfg.to_record(), "seed_splits": split_ranges(),
        "demonstrations": {"data_root": str(data_root), **json.loads(demos.read_text())},
        "vision_pretraining": _pretraining_record(cfg) if pretrained else None,
        "init": str(init), "stages": stages, "selection": selection, "checkpoint": str(checkpoint),
        "evaluation": evaluation,
        "minutes": {"demonstrations": (t_demos - t0) / 60, "init_and_vision_pretraining": (t_init - t_demos) / 60,
                    **{s["stage"]: s["minutes"] for s in stages}, "selection": (t_select - t_stages) / 60,
                    **{f"evaluation_{k}": v["wall_s"] / 60 for k, v in evaluation.items()}},
        "torch_threads": torch.get_num_threads(), "torch_version": torch.__version__,
        "machine": {"cpu": cpu_info(), "cores": os.cpu_count(), "bf16_autocast": cfg.autocast()},
    }
    text = json.dumps(record, indent=2) + "\n"
    (cfg.output_dir / "evaluation.json").write_text(text)
    if cfg.install_dir is not None:
        curves = [cfg.output_dir / s["curve"] for s in stages] + ([cfg.output_dir / PRETRAIN_CURVE] if pretrained else [])
        install(checkpoint, [*curves, cfg.output_dir / "evaluation.json", demos], cfg.install_dir)
    return json.loads(text)  # what the file holds


def _pretraining_record(cfg: PolicyTrainConfig) -> dict[str, Any]:
    from prismatic_tr.policy.vision_pretrain import scene_seeds

    pre = cfg.vision_pretrain_config()
    scenes = scene_seeds(pre.seed, pre.steps, pre.batch_size)
    return {"steps": pre.steps, "batch_size": pre.batch_size, "learning_rate": pre.learning_rate,
            "warmup_steps": pre.warmup_steps, "seed": pre.seed, "scene_seeds": [scenes.start, scenes.stop - 1],
            "curve": PRETRAIN_CURVE}
