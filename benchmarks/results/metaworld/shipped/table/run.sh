#!/bin/bash
# issues 47/48: the shipped MetaWorld policy (stage 2's step 1500) on the 500 test episodes, per setting, untimed.
# It ran in three invocations on one journal (episodes.jsonl): first the unreduced row alone, on the run's step-1500
# checkpoint (the same files: the journal's checkpoint_sha256), with --settings "[none] --workers 1 --num_threads 1";
# then keep 0.25 at both sites; then the table's other settings. Each resumed the journal and ran only the missing
# (setting, task) jobs; this command, run again, reuses all of them and rewrites results.json / results.csv.
cd /work/main
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec .venv/bin/python vla_scripts/eval_metaworld.py --split test --episodes 50 \
  --settings "[none,diverse:0.5,diverse:0.25,diverse:0.1,vision:diverse:0.5@0.25,vision:diverse:0.25@0.25,vision:diverse:0.1@0.25,llm:attention:0.5@0.25]" \
  --timing_runs 0 --workers 2 --output_dir benchmarks/results/metaworld/shipped/table --progress false
