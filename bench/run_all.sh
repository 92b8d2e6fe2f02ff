#!/usr/bin/env bash
# Regenerates every table and plot of docs/benchmarks.md. Run it on a quiet machine: it
# takes about an hour and a half on the 2-core development VM (the PyTorch ladder and the
# attention sweep are most of it).
#
# usage: bench/run_all.sh [OUT] [PART...]
#   OUT   folder for the tables (.txt), JSON lines (.jsonl) and plots (.svg);
#         default docs/bench
#   PART  any of: ladder goals seed attention labs (default: all of them)
#
# Each part writes OUT/<name>.txt (the table as printed); the comparisons with PyTorch also
# write OUT/<name>.jsonl (one JSON object per row, handgrad's and PyTorch's figures).
# THREADS (default 2) sets the thread count; ROUNDS (default 1) makes the comparisons run
# each configuration's processes that many times, alternating, and report the median round.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/bench}
shift || true
parts=("$@")
((${#parts[@]})) || parts=(ladder goals seed attention masks labs)
threads=${THREADS:-2}
compare=(bench/compare_torch --rounds "${ROUNDS:-1}")
mkdir -p "$out"
scripts/build.sh build >/dev/null
export OPENBLAS_CORETYPE=SkylakeX

run() { # name, command...: the table to OUT/name.txt (and the terminal), progress to stderr
    local name=$1
    shift
    echo "== $name: $*" >&2
    "$@" | tee "$out/$name.txt"
}

for part in "${parts[@]}"; do
    case $part in
    ladder) # the model ladder: handgrad alone (warm-up 0 and 1), then side by side with PyTorch
        run ladder_warmup0 build/handgrad bench --model small,medium --batch 4 --ctx 256 --threads "$threads" \
            --warmup 0 --steps 5
        run ladder build/handgrad bench --model small,medium,large,xl,2.7B --batch 4 --ctx 256 \
            --threads "$threads" --warmup 1 --steps 5 --plot "$out"
        run ladder_torch "${compare[@]}" --model small,medium,large,xl,2.7B --batch 4 --ctx 256 \
            --threads "$threads" --warmup 1 --steps 5 --plot "$out" --jsonl "$out/ladder_torch.jsonl"
        ;;
    goals) # the issue's speed goals: GPT-2 small, B=4, T=256, 1 and 2 threads
        run goals "${compare[@]}" --model small --batch 4 --ctx 256 --threads "1,$threads" --warmup 1 --steps 5 \
            --jsonl "$out/goals.jsonl"
        ;;
    seed) # the seed post's shape: GPT-2 small, B=8, T=1024
        run seed "${compare[@]}" --model small --batch 8 --ctx 1024 --threads "$threads" --warmup 1 --steps 3 \
            --jsonl "$out/seed.jsonl"
        ;;
    attention) # head size x sequence length, handgrad alone and against PyTorch
        run attention build/handgrad bench --attention --threads "$threads" --warmup 1 --steps 3 --plot "$out"
        run attention_torch "${compare[@]}" --attention --threads "$threads" --warmup 1 --steps 3 --plot "$out" \
            --jsonl "$out/attention_torch.jsonl"
        ;;
    masks) # packed documents and sliding windows against causal attention, then packed chat end to end
        run attention_masks bench/attention_masks.sh build 3 64,128
        run packing build/bench/packing cs336-small 64 3 200 0.9 1024 2 8
        ;;
    labs) # kernel labs: shares of the sgemm by wall clock and by CPU time
        export OMP_WAIT_POLICY=passive
        run lab_attention build/bench/kernel_lab_attention 64 4096 8 "$threads" 3
        run lab_step build/bench/kernel_lab_step small 4 256 "$threads" 3
        run lab_gemm build/bench/kernel_lab_gemm small 4 256 "$threads" 9
        ;;
    *)
        echo "run_all.sh: unknown part '$part' (ladder goals seed attention masks labs)" >&2
        exit 2
        ;;
    esac
done
echo "run_all.sh: tables and plots in $out" >&2
