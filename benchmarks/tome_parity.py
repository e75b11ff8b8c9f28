"""Our Token Merging (written from the paper, prismatic_tr.vit.merging) against facebookresearch/ToMe's own code.

ToMe is CC BY-NC 4.0 and is not part of this package: clone it yourself and point --tome_dir at the checkout
(the folder that holds the ``tome`` package). Both patch copies of the same random-weight timm DeiT-S; the
logits on the same images are compared for each r, with fused (SDPA) and unfused attention.

    python benchmarks/tome_parity.py --tome_dir /path/to/ToMe
"""

from __future__ import annotations

import argparse
import copy
import sys

import timm
import torch

from prismatic_tr.vit import apply_vit_reduction

R_VALUES = (8, 13, (16, -1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tome_dir", required=True, help="a checkout of facebookresearch/ToMe")
    parser.add_argument("--model", default="deit_small_patch16_224")
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args(argv)
    sys.path.insert(0, args.tome_dir)
    try:
        import tome
    except ImportError:
        parser.error(f"--tome_dir {args.tome_dir!r} holds no importable 'tome' package")
    torch.manual_seed(0)
    base = timm.create_model(args.model, pretrained=False).eval()
    images = torch.randn(args.batch, 3, 224, 224)
    print(f"timm {timm.__version__}, torch {torch.__version__}, {args.model}, random weights, seed 0")
    for fused in (False, True):
        for r in R_VALUES:
            ref, ours = copy.deepcopy(base), copy.deepcopy(base)
            for model in (ref, ours):
                for block in model.blocks:
                    block.attn.fused_attn = fused
            tome.patch.timm(ref)
            ref.r = r
            apply_vit_reduction(ours, "tome", r=r)
            with torch.no_grad():
                a, b = ref(images), ours(images)
            agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
            print(f"fused={fused!s:5} r={r!s:8} max|logit diff| {(a - b).abs().max().item():.3g}  "
                  f"argmax agreement {agree:.2f}  (logits up to {a.abs().max().item():.3g})")


if __name__ == "__main__":
    main()
