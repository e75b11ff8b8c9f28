"""Run from the repository root after train_policy.py (the command in README.md). Continue the first full policy run: 2000 more steps at constant lr 3e-4, then 200 unseen episodes."""
import json
import time
from pathlib import Path

from prismatic_tr.policy.train import DATASET, PolicyTrainConfig, evaluate, write_curve
from prismatic_tr.training import FinetuneConfig, finetune

ckpt = Path("outputs/policy/runs/init+tabletop_pick+b32+lr-0.0007/checkpoints/latest")
ft = FinetuneConfig(vla_path=str(ckpt), data_root_dir=Path("outputs/policy/data"), dataset_name=DATASET,
                    run_root_dir=Path("outputs/policy/runs_continued"), batch_size=32, max_steps=2000, save_steps=2000,
                    learning_rate=3e-4, lr_schedule="constant", lr_warmup_steps=50, bf16_autocast=True, use_lora=False,
                    shuffle_buffer_size=50_000, seed=1, log_every=50, progress_bar=False)
t = time.perf_counter()
res = finetune(ft)
write_curve(res.history, Path("outputs/policy/training_curve_continued.csv"))
ev = evaluate(PolicyTrainConfig(output_dir=Path("outputs/policy"), eval_episodes=200, progress=False), res.last_checkpoint)
out = {"train_minutes": (time.perf_counter() - t) / 60, "checkpoint": str(res.last_checkpoint), "evaluation": ev}
Path("outputs/policy/evaluation_continued.json").write_text(json.dumps(out, indent=2))
print(json.dumps({k: v for k, v in ev.items() if k != "seeds"}))
