#!/bin/bash
# issues 47/48: the shipped MetaWorld policy (stage 2's step 1500) on the 500 test episodes, per setting, untimed.
# It ran in three invocations on one journal (episodes.jsonl): first the unreduced row alone, on the run's step-1500
# checkpoint (the same files: the journal's checkpoint_sha256), with --settings "[none] --workers 1 --num_threads 1";
# then keep 0.25 at both sites; then the table's other settings; then (issue 48) diverse_merge at the projector site
# (--workers 2), then at the vision site (--workers 1 --num_threads 1, on one core beside a fine-tune), then
# diverse_merge_keys at the vision site (--workers 2, after ../validation_vision_keys*/; keeps 0.5 and 0.25, then 0.1). Each resumed
# the journal and ran only the missing (setting, task) jobs; this command, run again, reuses all of them and rewrites
# results.json / results.csv. Extra arguments go to eval_metaworld.py (e.g. --num_threads 1).
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec ${PYTHON:-.venv/bin/python} vla_scripts/eval_metaworld.py --split test --episodes 50 \
  --settings "[none,diverse:0.5,diverse:0.25,diverse:0.1,vision:diverse:0.5@0.25,vision:diverse:0.25@0.25,vision:diverse:0.1@0.25,llm:attention:0.5@0.25,diverse_merge:0.5,diverse_merge:0.25,diverse_merge:0.1,vision:diverse_merge:0.5@0.25,vision:diverse_merge:0.25@0.25,vision:diverse_merge:0.1@0.25,vision:diverse_merge_keys:0.5@0.25,vision:diverse_merge_keys:0.25@0.25,vision:diverse_merge_keys:0.1@0.25]" \
  --timing_runs 0 --workers ${WORKERS:-2} --output_dir benchmarks/results/metaworld/shipped/table --progress false "$@"
