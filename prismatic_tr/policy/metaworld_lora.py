"""LoRA fine-tunes of a MetaWorld policy under a reduction, shipped as adapters (``--lora_rank`` of the recipe).

    train_metaworld_policy.py --init_oft prismatic_tr/assets/metaworld_policy --setting diverse:0.1 \\
        --onpolicy_episodes 40 --lora_rank 32 --learning_rate 5e-4

The recipe's fine-tunes train the whole policy (8.5 MB a checkpoint); an adapter is what the project ships for a
setting (:mod:`prismatic_tr.policy.adapters`: LoRA on the towers, projector and Llama, the action head and proprio
projector whole, in OFT's files). With ``--lora_rank`` the recipe trains with the trainer the tabletop adapters are
made with (:func:`prismatic_tr.training.loop.finetune`, ``vla_scripts/finetune.py``): the same data (the on-policy
episodes or the demonstrations in ``<output_dir>/data``, and earlier on-policy rounds named by
``--onpolicy_aggregate``: the trainer's ``aggregate_data_roots``), the setting attached, L1 on the chunk, the policy's own
statistics, the recipe's batch, steps, rate, warm-up and cosine schedule. Its checkpoints hold the merged policy, so
the recipe chooses on validation and tests them as any other; the chosen one's adapter is then written to
``<output_dir>/adapter`` (float16, with its record: :func:`~prismatic_tr.policy.adapters.install_adapter`) and,
with ``--install_dir``, there, beside the run's ``evaluation.json``.

A LoRA run is not resumed part-way (the trainer starts again); a run that finished is reused as any stage is.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

RUNS = "runs"          # <output_dir>/runs/<run name>/checkpoints/step_*: the trainer's layout
ADAPTER = "adapter"    # <output_dir>/adapter: the chosen checkpoint's adapter as shipped
EVALUATION = "evaluation.json"   # the recipe's record of the run, shipped beside the adapter


def check_lora_flags(cfg: Any) -> None:
    """``--lora_rank``'s companions, before any work (ValueError naming the first bad one): an integer >= 0; with
    a rank, a policy to adapt (``--init_oft``), a setting that reduces and no stage 2 (earlier on-policy rounds,
    ``--onpolicy_aggregate``, train beside this one's as for the whole policy)."""
    from prismatic_tr.cli import check_int_flag

    check_int_flag("lora_rank", cfg.lora_rank, 0)
    if not cfg.lora_rank:
        return
    if cfg.init_oft is None or not cfg.parsed_setting.reductions():
        raise ValueError(f"--lora_rank {cfg.lora_rank} makes an adapter of a policy for a setting: give --init_oft "
                         f"and a --setting that reduces (got {cfg.init_oft}, {cfg.setting!r})")
    if (cfg.refine.max_steps or 0) > 0:
        raise ValueError(f"--lora_rank {cfg.lora_rank} has no stage 2: omit --refine.max_steps")


def finetune_config(cfg: Any, data_root: Path, dataset: str) -> Any:
    """The trainer's :class:`~prismatic_tr.training.config.FinetuneConfig` for the recipe's flags."""
    from prismatic_tr.training.config import FinetuneConfig, TokenReductionConfig

    return FinetuneConfig(
        vla_path=str(cfg.init_oft), data_root_dir=data_root, dataset_name=dataset,
        aggregate_data_roots=[Path(root) for root in cfg.onpolicy_aggregate],
        run_root_dir=cfg.output_dir / RUNS, batch_size=cfg.batch_size, max_steps=cfg.max_steps,
        save_steps=cfg.save_steps, save_latest_checkpoint_only=False, learning_rate=cfg.learning_rate,
        lr_schedule="cosine", lr_warmup_steps=cfg.lr_warmup_steps, bf16_autocast=cfg.autocast(),
        shuffle_buffer_size=20_000, norm_stats_from_vla=True, freeze_vision_backbone=cfg.freeze_vision,
        seed=cfg.seed, use_lora=True, lora_rank=cfg.lora_rank, token_reduction=TokenReductionConfig(spec=cfg.setting),
        log_every=50, progress_bar=cfg.progress)


def train_lora(cfg: Any, data_root: Path, dataset: str, curve: Path) -> tuple[dict[int, Path], list[dict[str, float]]]:
    """Train the adapter; returns its checkpoints by step (each the merged policy, its adapter in ``adapter/``)
    and the per-step history, written to ``curve`` (CSV). A cut-off run's checkpoints are removed first, so the
    choice never sees another run's."""
    from prismatic_tr.policy.train import write_curve
    from prismatic_tr.training.loop import finetune

    shutil.rmtree(cfg.output_dir / RUNS, ignore_errors=True)
    result = finetune(finetune_config(cfg, data_root, dataset))
    checkpoints = {int(p.name.removeprefix("step_")): p
                   for p in sorted((Path(result.run_dir) / "checkpoints").glob("step_*"))}
    write_curve(result.history, curve, list(dict.fromkeys(k for row in result.history for k in row)))
    return checkpoints, result.history


def write_adapter(checkpoint: Path, cfg: Any, dataset: str) -> Path:
    """The chosen checkpoint's adapter as shipped (float16, its setting, its record) in ``<output_dir>/adapter``;
    its record names the benchmark (``dataset``) and the recipe's ``evaluation.json`` shipped beside it."""
    from prismatic_tr.policy.adapters import RECORD_FILE, install_adapter

    dest = install_adapter(checkpoint, cfg.output_dir / ADAPTER, base=cfg.init_oft)
    record = json.loads((dest / RECORD_FILE).read_text())
    record.update(benchmark=dataset, recipe="vla_scripts/train_metaworld_policy.py --lora_rank "
                  "(prismatic_tr.policy.metaworld_lora)", evaluation=f"{EVALUATION}: the choice on validation and "
                  "the test of this checkpoint (copied beside the adapter when it ships)")
    (dest / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return dest


def ship_adapter(adapter: Path, evaluation: Path, target: Path) -> Path:
    """Copy the adapter and the run's ``evaluation.json`` (how it was chosen and what it gave on test) to
    ``target`` (``--install_dir``, e.g. ``prismatic_tr/assets/adapters/<name>``)."""
    target.mkdir(parents=True, exist_ok=True)
    for file in adapter.iterdir():
        shutil.copy2(file, target / file.name)
    shutil.copy2(evaluation, target / EVALUATION)
    return target
