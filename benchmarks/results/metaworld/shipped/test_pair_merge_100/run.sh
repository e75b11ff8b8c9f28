#!/bin/bash
# issue 48: diverse_merge:0.5 at the projector site with its groups grown by merging the most alike pairs
# (benchmarks/metaworld_pair_merge.py, i.e. pair_merge:0.5), chosen on validation (../validation_pair_merge/), on the
# 1,000 test episodes of ../test_keep0.5_100/ (100 a task, seeds 3,000,000-3,000,099), the shipped MetaWorld policy,
# float32, one worker on one core; nothing timed. Decided before it ran: every figure is reported, whatever it gives.
# Two parts, run at once, one a core: `run.sh hard` (reach, push, pick-place, door-open; CORE default 0) and
# `run.sh others` (the other six; CORE default 1), each into its folder. `run.sh vision`, run after (decided after
# the table's 500 and before this ran: reported whatever it gives): vision:pair_merge:0.5@0.25 on the same episodes,
# a plain run (the method was in the grammar by then), the unreduced jobs copied from the same journal. The unreduced jobs are ../test_keep0.5_100/'s
# (a plain run's: the patch changes only reduced calls, tests/envs/test_pair_merge.py), copied into the part's journal
# under this run's identity by benchmarks/metaworld_seed_unreduced.py before its first run.
cd "$(dirname "$0")/../../../../.."
if [ "$1" = vision ]; then  # vision:pair_merge:0.5@0.25, a plain setting by then: both workers, the unreduced jobs copied
  OUT=benchmarks/results/metaworld/shipped/test_pair_merge_100/vision
  SRC=benchmarks/results/metaworld/shipped/test_keep0.5_100/episodes.jsonl
  [ -f $OUT/episodes.jsonl ] || { mkdir -p $OUT && { head -n 1 $SRC; grep '^{"setting": "none"' $SRC; } > $OUT/episodes.jsonl; }
  export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
  exec ${PYTHON:-.venv/bin/python} vla_scripts/eval_metaworld.py --settings "[none,vision:pair_merge:0.5@0.25]" \
    --split test --episodes 100 --workers ${WORKERS:-2} --timing_runs 0 --progress false --output_dir $OUT
fi
case "$1" in
  hard) tasks=reach-v3,push-v3,pick-place-v3,door-open-v3; core=0 ;;
  others) tasks=drawer-open-v3,drawer-close-v3,button-press-topdown-v3,peg-insert-side-v3,window-open-v3,window-close-v3; core=1 ;;
  *) echo "run.sh: give the part, hard, others or vision (got '$1')" >&2; exit 2 ;;
esac
OUT=benchmarks/results/metaworld/shipped/test_pair_merge_100/$1
[ -f $OUT/episodes.jsonl ] || ${PYTHON:-.venv/bin/python} benchmarks/metaworld_seed_unreduced.py --output_dir $OUT \
  --patch '{"pair_merge": true}' --sources benchmarks/results/metaworld/shipped/test_keep0.5_100/episodes.jsonl || exit
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-$core} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_pair_merge.py -- \
  --settings "[none,diverse_merge:0.5]" --tasks "[$tasks]" \
  --split test --episodes 100 --workers 1 --num_threads 1 --timing_runs 0 --progress false --output_dir $OUT
