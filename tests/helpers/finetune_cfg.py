"""The small fine-tuning config the fine-tuning tests share (two steps on the RLDS fixture, LoRA rank 4)."""

from __future__ import annotations

from pathlib import Path

from helpers.rlds_fixture import DATASET

from prismatic_tr.training import FinetuneConfig


def make_cfg(paths, tmp_path: Path, **kw) -> FinetuneConfig:
    root, vla_dir = paths
    base = dict(vla_path=str(vla_dir), data_root_dir=root, dataset_name=DATASET, run_root_dir=tmp_path / "runs",
                batch_size=2, max_steps=2, save_steps=100, lora_rank=4, shuffle_buffer_size=8, learning_rate=5e-3,
                log_every=1, progress_bar=False)
    base.update(kw)
    return FinetuneConfig(**base)
