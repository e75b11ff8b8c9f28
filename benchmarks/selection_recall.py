"""Which patches does each selection keep? Object recall of every method at the ``projector`` and ``vision`` sites.

The bundled tabletop policy sees small objects on a textured table. For each validation-split scene (the split for
choosing) this renders two frames (the effector at its start, and halfway to the target object), labels every
patch of the 16 x 16 grid from the scene's geometry (``prismatic_tr.envs.patch_labels``: which object covers the
patch centre, if any), runs the backbone with each setting attached, and counts, among the patches the setting
keeps:

* ``object_recall``: the fraction of object patches kept (the objects the policy must tell apart);
* ``target_recall``: the fraction of the instructed object's patches kept;
* ``object_share``: the fraction of kept patches that show an object (``random`` keeps the area fraction).

It also times each scorer, interleaved with the unreduced vision backbone (``scorer_ms`` against
``backbone_ms``, medians; ratios only, the machine is shared). Closed-loop success is measured by
``vla_scripts/eval_policy.py``; this explains it.

    python benchmarks/selection_recall.py --scenes 100

Writes ``benchmarks/results/selection/selection_recall.json`` (or ``--output``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch  # torch before tensorflow

from prismatic_tr.bench.vla.selection_recall import selection_recall

OUTPUT = Path(__file__).parent / "results" / "selection" / "selection_recall.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", type=int, default=100)
    parser.add_argument("--objects", type=int, default=None, help="objects per scene (default: the task's 3-5)")
    parser.add_argument("--timing_runs", type=int, default=30)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    if args.scenes < 1 or (args.objects is not None and not 1 <= args.objects <= 5):
        parser.error(f"--scenes {args.scenes} / --objects {args.objects}: need scenes >= 1 and objects in 1..5")
    torch.set_num_threads(1)
    command = f"python benchmarks/selection_recall.py --scenes {args.scenes}" + (
        f" --objects {args.objects}" if args.objects is not None else "")
    record = selection_recall(args.scenes, args.objects, args.timing_runs, command)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record["scorer_cost"]), f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
