#!/bin/bash
# issue 48: diverse_merge (with proportional attention) against diverse on the bundled tabletop policy's validation
# episodes (the same seeds as eval_val_025.json / eval_val_010.json), for the rule that the default changes only with
# a win on validation on both MetaWorld and the tabletop task
cd "$(dirname "$0")/../../../.."
exec .venv/bin/python vla_scripts/eval_policy.py --split validation --episodes 100 --methods "[]" \
  --settings diverse:0.25 diverse_merge:0.25 diverse:0.1 diverse_merge:0.1 --timing_runs 1 --num_threads 2 \
  --progress false --output_dir benchmarks/results/selection/val_merge
