#!/usr/bin/env bash
# End to end: `handgrad train` data parallel under mpirun. 2 ranks (ZeRO-1) follow one
# process's loss trajectory; a checkpoint moves from 1 rank to 2 and from 2 to 1 and the
# runs continue on the same trajectory; resuming on the same rank count writes the same
# checkpoint bytes; a batch that the ranks do not divide fails on both, and so does
# --device cuda on 2 ranks (a CUDA model trains on one).
# Usage: dist_cli.sh path/to/handgrad mpiexec
set -euo pipefail
hg=$1
mpi=("$2" --oversubscribe -n)
[[ $(id -u) -eq 0 ]] && mpi=("$2" --oversubscribe --allow-run-as-root -n)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "dist_cli: $*" >&2; exit 1; }
cd "$work"

for i in $(seq 1 400); do echo "Line $i: the quick brown fox, it's $((i * 37 % 101)) jumps over the lazy dog."; done >corpus.txt
"$hg" tokenizer train --vocab-size 300 --out tok corpus.txt 2>/dev/null
"$hg" prepare --quiet --tokenizer tok --out shards --val-fraction 0.1 --shard-tokens 4000 corpus.txt 2>/dev/null
args=(--model tiny --tokenizer tok --train 'shards/train_*.bin' --val 'shards/val_*.bin' --eval-every 3
      --eval-batches 2 --batch 4 --ctx 32 --max-steps 6 --threads 1 --peak-gflops 100 --ckpt-every 3 --lr 1e-3)

# Step losses of a run, one per line.
losses() { grep '"type": "step"' "$1/train.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
# Two runs' losses agree within fp32 reduction-order tolerance (seen: 5e-8 relative).
same() {
  paste <(losses "$1") <(losses "$2") | awk -v a="$1" -v b="$2" '
    { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 3e-6 * $1) { print a " vs " b ", step " n ": " $1 " vs " $2; bad = 1 } }
    END { if (n != 6) { print a " vs " b ": " n " steps"; bad = 1 } exit bad }' || fail "trajectories differ"
}
# Keeps only the step-3 checkpoint of a run, to resume from.
back_to_3() { cp -r "$1" "$2" && rm -rf "$2/ckpt_00000006"; }

"$hg" train "${args[@]}" --out one >one.log 2>&1 || fail "1 rank: $(cat one.log)"
"${mpi[@]}" 2 "$hg" train "${args[@]}" --out two --zero 1 >two.log 2>&1 || fail "2 ranks: $(cat two.log)"
grep -q "data parallel: 2 ranks (mpi)" two.log || fail "no data-parallel line: $(cat two.log)"
same one two
grep -q '"type": "eval"' two/train.jsonl || fail "2 ranks: no eval record"

back_to_3 one one_to_two
"${mpi[@]}" 2 "$hg" train --resume --out one_to_two --zero 1 >a.log 2>&1 || fail "1 -> 2 ranks: $(cat a.log)"
same one one_to_two
back_to_3 two two_to_one
"$hg" train --resume --out two_to_one --zero 0 >b.log 2>&1 || fail "2 -> 1 rank: $(cat b.log)"
same one two_to_one
back_to_3 two two_again
"${mpi[@]}" 2 "$hg" train --resume --out two_again >c.log 2>&1 || fail "2 -> 2 ranks: $(cat c.log)"
for f in model optimizer; do
  cmp -s two/ckpt_00000006/$f.safetensors two_again/ckpt_00000006/$f.safetensors || fail "same-N resume: $f differs"
done

if "${mpi[@]}" 2 "$hg" train "${args[@]}" --out bad --batch 3 >bad.log 2>&1; then fail "batch 3 on 2 ranks ran"; fi
for r in 0 1; do
  grep -q "(rank $r of 2): --batch 3 is not divisible by the 2 ranks" bad.log || fail "rank $r did not say why: $(cat bad.log)"
done
[[ ! -e bad ]] || fail "a refused run wrote its folder"
if "${mpi[@]}" 2 "$hg" train "${args[@]}" --out bad --device cuda >bad.log 2>&1; then fail "--device cuda on 2 ranks ran"; fi
for r in 0 1; do
  grep -q "(rank $r of 2): --device cuda: data parallelism (2 ranks) is refused for CUDA models" bad.log ||
    fail "--device cuda: rank $r did not say why: $(cat bad.log)"
done
[[ ! -e bad ]] || fail "a refused run wrote its folder"
echo "dist_cli: ok"
