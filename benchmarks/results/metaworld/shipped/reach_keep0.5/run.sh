#!/bin/bash
# issue 48: how near reach's episodes come to its goal, unreduced and at keep 0.5 (both sites), the shipped MetaWorld
# policy, 30 validation episodes (the seeds of ../validation_merge_groups/), float32, one thread a run; each run
# traces the policy and MetaWorld's scripted expert on the same seeds (benchmarks/metaworld_failures.py). SETTING
# (default: all three, one after another) and CORE (default 0) choose; nothing timed.
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
for s in ${SETTING:-none diverse_merge:0.5 vision:diverse_merge:0.5@0.25}; do
  taskset -c ${CORE:-0} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_failures.py --tasks reach-v3 --episodes 30 \
    --setting "$s" --output_dir "benchmarks/results/metaworld/shipped/reach_keep0.5/${s//[:@]/_}" || exit
done
