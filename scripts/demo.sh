#!/usr/bin/env bash
# The main job, on its embedded default: install what is missing, build, prepare the King
# James Bible (a tokenizer trained on it, token shards), train a small GPT on the CPU for a
# few minutes with a live progress bar, print samples from a few prompts, and say where
# the loss plot, the log and the checkpoint are. Idempotent: a finished run is reused
# (--resume), an interrupted one continues.
set -euo pipefail
cd "$(dirname "$0")/.."
# Installing packages and building print some 150 lines: they go to a log, shown only
# when something fails.
log=build/demo-build.log
mkdir -p build
echo "demo: installing missing packages and building handgrad (log: $log)"
if ! { scripts/deps.sh && scripts/build.sh build; } >"$log" 2>&1; then
  echo "demo: the build failed; the last 30 lines of $log:" >&2
  tail -n 30 "$log" >&2
  echo "demo: the whole log is $log" >&2
  exit 1
fi
scripts/prepare_kjv.sh
run=runs/kjv
threads=$(nproc)
# Idle OpenMP threads sleep instead of spinning: on a machine with other work running,
# spinning threads fight for the cores and a step can take several times longer.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
build/handgrad train --resume --out "$run" \
  --train 'data/kjv/train_*.bin' --val 'data/kjv/val_*.bin' \
  --n-layer 4 --n-head 2 --d-model 128 --ctx 128 --batch 8 \
  --max-steps 1500 --lr 3e-3 --min-lr 3e-4 --warmup-steps 50 \
  --eval-every 250 --eval-batches 10 --ckpt-every 250 --keep-last 2 \
  --print-every 100 --threads "$threads"
echo
seed=1
for prompt in "And God said" "In the beginning" "Blessed are the"; do
  echo "== handgrad generate --prompt \"$prompt\""
  build/handgrad generate --model "$run" --prompt "$prompt" --max-new-tokens 80 \
    --temperature 0.8 --top-k 40 --seed "$seed" --threads "$threads" 2>/dev/null
  echo
  seed=$((seed + 1))
done
ckpt=$(ls -d "$run"/ckpt_* | tail -n 1)
echo "loss plot:  $run/loss.svg"
echo "log:        $run/train.jsonl"
echo "checkpoint: $ckpt/  (handgrad generate --model $run --prompt \"...\")"
