"""Continue a policy run from its checkpoint at a constant learning rate, then evaluate on the 200 unseen
episodes. Run from the repository root after train_policy.py (the commands in README.md). The defaults are
the continuation of the first full run; ``--output_dir`` gets ``training_curve_continued.csv`` and
``evaluation_continued.json``, ``--run_root`` the new checkpoint."""
import argparse
import json
import time
from pathlib import Path

from prismatic_tr.envs.splits import VALIDATION
from prismatic_tr.policy.train import DATASET, evaluate, write_curve
from prismatic_tr.training import FinetuneConfig, finetune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split(".")[0])
    parser.add_argument("--checkpoint", type=Path,
                        default=Path("outputs/policy/runs/init+tabletop_pick+b32+lr-0.0007/checkpoints/latest"))
    parser.add_argument("--data_root", type=Path, default=Path("outputs/policy/data"))
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/policy"))
    parser.add_argument("--run_root", type=Path, default=Path("outputs/policy/runs_continued"))
    parser.add_argument("--max_steps", type=int, default=2000)
    parser.add_argument("--learning_rate", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    ft = FinetuneConfig(vla_path=str(args.checkpoint), data_root_dir=args.data_root, dataset_name=DATASET,
                        run_root_dir=args.run_root, batch_size=32, max_steps=args.max_steps, save_steps=args.max_steps,
                        learning_rate=args.learning_rate, lr_schedule="constant", lr_warmup_steps=50, bf16_autocast=True,
                        use_lora=False, shuffle_buffer_size=50_000, seed=args.seed, log_every=50, progress_bar=False)
    t = time.perf_counter()
    res = finetune(ft)
    write_curve(res.history, args.output_dir / "training_curve_continued.csv")
    ev = evaluate(res.last_checkpoint, VALIDATION, 200)
    out = {"train_minutes": (time.perf_counter() - t) / 60, "checkpoint": str(res.last_checkpoint), "evaluation": ev,
           "args": {k: str(v) for k, v in vars(args).items()}}
    (args.output_dir / "evaluation_continued.json").write_text(json.dumps(out, indent=2))
    print(json.dumps({k: v for k, v in ev.items() if k not in ("seeds", "failed_seeds")}))


if __name__ == "__main__":
    main()
