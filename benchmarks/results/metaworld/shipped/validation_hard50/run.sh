#!/bin/bash
# issue 48: on the four tasks keep 0.5 loses most (reach, push, pick-place, door-open), validation (50 episodes a task,
# seeds 1,000,000-1,000,049), the shipped MetaWorld policy, float32, two workers; nothing timed: unreduced; keep 0.5
# with diverse_merge at the projector site and at the vision site cut after 1/4, 1/2 and 3/4 of the towers' blocks;
# then pair_merge (added to the run once it was in the grammar: the journal resumed, the earlier jobs reused) at
# both sites and keeps 0.5, 0.25 and 0.1.
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec ${PYTHON:-.venv/bin/python} vla_scripts/eval_metaworld.py --split validation --episodes 50 \
  --tasks "[reach-v3,push-v3,pick-place-v3,door-open-v3]" \
  --settings "[none,diverse_merge:0.5,vision:diverse_merge:0.5@0.25,vision:diverse_merge:0.5@0.5,vision:diverse_merge:0.5@0.75,pair_merge:0.5,vision:pair_merge:0.5@0.25,pair_merge:0.25,vision:pair_merge:0.25@0.25,pair_merge:0.1,vision:pair_merge:0.1@0.25]" \
  --timing_runs 0 --workers ${WORKERS:-2} --output_dir benchmarks/results/metaworld/shipped/validation_hard50 --progress false "$@"
