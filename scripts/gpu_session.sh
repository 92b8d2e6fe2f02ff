#!/usr/bin/env bash
# The GPU session's work, in parts that each fit one 10-minute device call (docs/cuda.md).
# Runs on the GPU machine from the repository root, with .gpu/ carried (made here by
# scripts/gpu_bundle.sh; unpacked to /tmp/handgrad-gpu); logs and results go to $OUT
# (default gpu-out/).
#   check            GPU facts, the gpu-labelled tests, a GPT-2 small step   (~3 min)
#   sanitize         compute-sanitizer memcheck and racecheck on the op tests (~5 min)
#   bench-train      GPT-2 small B=8/16/32: handgrad vs torch eager/compile  (~8 min)
#   bench-attention  flash attention sweep vs SDPA's four backends           (~5 min)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
part=${1:?usage: scripts/gpu_session.sh check|sanitize|bench-train|bench-attention}
out=${OUT:-gpu-out}
mkdir -p "$out"
[ -f .gpu/bundle.tar.gz ] || { echo "gpu_session: .gpu/ is missing: run scripts/gpu_bundle.sh here and carry .gpu"; exit 2; }
bin=/tmp/handgrad-gpu
rm -rf "$bin" && mkdir -p "$bin" && tar -xzf .gpu/bundle.tar.gz -C "$bin" || exit 2
# cuBLASLt, cudart and NCCL (the CUDA module links them): the toolkit's, else PyTorch's wheels
pylibs=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for n in ("libcublasLt", "libcudart", "libnccl") for p in glob.glob(d + "/**/" + n + ".so*", recursive=True)})))' 2>/dev/null)
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${pylibs}:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
status=0
step() { # step NAME CMD...: runs CMD, log in $out/NAME.log, keeps going on failure
  local name=$1; shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$out/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || status=1
}
case $part in
check)
  step gpu nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  step ldd ldd "$bin"/handgrad "$bin"/libhandgrad_cuda.so
  step test_cuda_ops "$bin"/test_cuda_ops
  step test_cuda_model "$bin"/test_cuda_model
  step bench_small "$bin"/handgrad bench --model small --batch 8 --ctx 1024 --device cuda --precision bf16 --warmup 2 --steps 5
  step bench_small_fp32 "$bin"/handgrad bench --model small --batch 8 --ctx 1024 --device cuda --precision fp32 --warmup 1 --steps 2
  ;;
sanitize)
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 "$bin"/test_cuda_ops
  step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 "$bin"/test_cuda_ops
  ;;
bench-train)
  step train python3 bench/compare_torch_cuda.py --part train --handgrad "$bin"/handgrad --out "$out"
  ;;
bench-attention)
  step attention python3 bench/compare_torch_cuda.py --part attention --attention-bin "$bin"/attention_cuda --out "$out"
  ;;
*) echo "gpu_session: unknown part '$part'"; exit 2 ;;
esac
exit $status
