"""Token reduction on an OpenVLA-architecture policy, end to end on a CPU.

    python examples/token_reduction_example.py                      # tiny reference model, seconds
    python examples/token_reduction_example.py --preset cpu-bench   # real DINOv2-L + SigLIP towers
    python examples/token_reduction_example.py --vla_path /path/to/openvla-7b   # a real checkpoint

With a reference model the weights are random: the actions are meaningless, the mechanics are real.
Timings are warm: every setting first runs ``--warmup`` untimed ``predict_action`` calls, then ``--runs``
timed calls per setting, interleaved (baseline, topk, ..., baseline, topk, ...), and the median is printed.
Attaching and removing a reduction happens outside the timed calls.
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
from PIL import Image

from experiments.robot.token_reduction_utils import (
    apply_token_reduction_to_vla,
    get_token_reduction,
    monkey_patch_vision_backbone_with_reduction,
    remove_token_reduction,
)
from prismatic_tr.bench.measure.timing import interleaved
from prismatic_tr.models import build_processor, build_prompt, build_vla, load_vla

# (label, reduction settings or None for the unreduced model)
SETTINGS: list[tuple[str, dict[str, Any] | None]] = [
    ("no reduction", None),
    ("topk_magnitude keep 50%", {"method": "topk_magnitude", "reduction_ratio": 0.5}),
    ("attention_score keep 50%", {"method": "attention_score", "reduction_ratio": 0.5}),
    ("random keep 50%", {"method": "random", "reduction_ratio": 0.5}),
    ("spatial_pool 2x2", {"method": "spatial_pool", "spatial_merge_size": 2}),
]


def load(args: argparse.Namespace):
    if args.vla_path:
        return load_vla(args.vla_path, dtype=torch.bfloat16, device="cpu")
    vla = build_vla(args.preset, args.vision_backbone_id, dtype=torch.bfloat16)
    return vla, build_processor(vla.config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny", choices=["tiny", "cpu-bench"])
    parser.add_argument("--vision_backbone_id", default="dinosiglip-vit-so-224px")
    parser.add_argument("--vla_path", default=None, help="checkpoint directory to load instead")
    parser.add_argument("--unnorm_key", default="bridge_orig")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per setting before timing")
    parser.add_argument("--runs", type=int, default=5, help="timed calls per setting (interleaved; median)")
    args = parser.parse_args()
    if args.warmup < 0 or args.runs < 1:
        parser.error(f"--warmup {args.warmup} / --runs {args.runs}: need warmup >= 0 and runs >= 1")

    vla, processor = load(args)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8))
    inputs = processor(build_prompt("pick up the red block"), image, return_tensors="pt")
    inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)

    def predict() -> np.ndarray:
        return vla.predict_action(**inputs, unnorm_key=args.unnorm_key, do_sample=False)

    def scoped(settings: dict[str, Any] | None) -> Any:
        """A context manager holding one setting's reduction (removed on exit)."""
        return nullcontext() if settings is None else monkey_patch_vision_backbone_with_reduction(vla, **settings)

    # What each setting does (untimed): tokens reaching the LLM and the action.
    for label, settings in SETTINGS:
        with scoped(settings):
            handle = get_token_reduction(vla)
            tokens = handle.reduced_num_patches() if handle else vla.vision_backbone.get_num_patches()
            print(f"{label:<26} tokens={tokens:>3}  action={np.round(predict(), 3)}")

    # How long each takes, warm and interleaved.
    stats = interleaved({label: predict for label, _ in SETTINGS}, warmup=args.warmup, repeats=args.runs,
                        contexts={label: (lambda s=s: scoped(s)) for label, s in SETTINGS})
    base = stats[SETTINGS[0][0]].median_ms
    print(f"\npredict_action, median of {args.runs} warm calls (p10-p90), settings interleaved:")
    for label, _ in SETTINGS:
        s = stats[label]
        print(f"{label:<26} {s.median_ms:8.1f} ms ({s.p10_ms:.1f}-{s.p90_ms:.1f})  speedup {base / s.median_ms:.2f}x")

    # The persistent API: apply, replace, remove; the model is exactly as before afterwards.
    baseline = predict()
    apply_token_reduction_to_vla(vla, method="topk_magnitude", reduction_ratio=0.5)
    apply_token_reduction_to_vla(vla, method="random", reduction_ratio=0.5)  # replaces the previous one
    remove_token_reduction(vla)
    print("\nbaseline action restored exactly after apply / replace / remove:", bool(np.array_equal(baseline, predict())))


if __name__ == "__main__":
    main()
