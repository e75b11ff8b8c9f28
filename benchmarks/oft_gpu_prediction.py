"""Predict (not measure) OpenVLA-OFT-7B's step on an H100 at batch 1 from a measured cpu-bench-oft run
(prismatic_tr.bench.vla.gpu_prediction states every figure and assumption).

    python benchmarks/oft_gpu_prediction.py                                   # benchmarks/results/oft/bfloat16
    python benchmarks/oft_gpu_prediction.py --results path/to/results.json

Prints one JSON object: the assumptions and one predicted row per measured setting.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "results" / "oft" / "bfloat16" / "results.json"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=DEFAULT, help="a cpu-bench-oft results.json")
    args = parser.parse_args(argv)
    if not args.results.is_file():
        parser.error(f"--results {str(args.results)!r} does not exist; run vla_scripts/benchmark.py --preset "
                     "cpu-bench-oft first")
    from prismatic_tr.bench.vla.gpu_prediction import assumptions, predict_run

    results = json.loads(args.results.read_text())
    out = {"what": "PREDICTION for OpenVLA-OFT-7B on an H100, batch 1 (not a measurement)",
           "from": str(args.results), "assumptions": assumptions(), "rows": predict_run(results)}
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
