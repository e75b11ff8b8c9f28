"""Token reduction on an OpenVLA-architecture policy, end to end on a CPU.

    python examples/token_reduction_example.py                      # tiny reference model, seconds
    python examples/token_reduction_example.py --preset cpu-bench   # real DINOv2-L + SigLIP towers
    python examples/token_reduction_example.py --vla_path /path/to/openvla-7b   # a real checkpoint

With a reference model the weights are random: the actions are meaningless, the mechanics are real.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from PIL import Image

from experiments.robot.token_reduction_utils import (
    apply_token_reduction_to_vla,
    get_token_reduction,
    monkey_patch_vision_backbone_with_reduction,
    remove_token_reduction,
)
from prismatic_tr.models import build_processor, build_prompt, build_vla, load_vla


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
    args = parser.parse_args()

    vla, processor = load(args)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8))
    inputs = processor(build_prompt("pick up the red block"), image, return_tensors="pt")
    inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)

    def step(label: str) -> np.ndarray:
        start = time.perf_counter()
        action = vla.predict_action(**inputs, unnorm_key=args.unnorm_key, do_sample=False)
        ms = (time.perf_counter() - start) * 1e3
        handle = get_token_reduction(vla)
        tokens = handle.reduced_num_patches() if handle else vla.vision_backbone.get_num_patches()
        print(f"{label:<34} tokens={tokens:>3}  {ms:7.1f} ms  action={np.round(action, 3)}")
        return action

    baseline = step("no reduction")
    for method, ratio in [("topk_magnitude", 0.5), ("attention_score", 0.5), ("random", 0.5)]:
        apply_token_reduction_to_vla(vla, method=method, reduction_ratio=ratio)  # replaces the previous one
        step(f"{method} keep {ratio:.0%}")
    remove_token_reduction(vla)

    with monkey_patch_vision_backbone_with_reduction(vla, method="spatial_pool", spatial_merge_size=2):
        step("spatial_pool 2x2 (scoped)")
    again = step("removed again")
    print("baseline action restored exactly:", bool(np.array_equal(baseline, again)))


if __name__ == "__main__":
    main()
