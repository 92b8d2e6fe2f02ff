#!/usr/bin/env bash
# The GPU session's work, in parts that each fit one 10-minute device call (docs/cuda.md).
# Runs on the GPU machine from the repository root, with .gpu/ carried (made here by
# scripts/gpu_bundle.sh; unpacked to /tmp/handgrad-gpu); logs and results go to $OUT
# (default gpu-out/).
#   session          the parts below in order, each under its own time limit, for one
#                    device call (SESSION_PARTS picks and orders them, SESSION_LIMITS
#                    "part=seconds ..." overrides limits, SESSION_LOGS names the logs'
#                    folder of a session run beside another); a timestamp
#                    before each part, the summary in $OUT/session.log, every part's logs
#                    packed into $OUT/logs.tar.gz after each part, so a call cut short
#                    keeps what it measured
#   facts            the machine: GPU, driver, host CPU's ISA, where cuDNN is
#   cudnn-ref        PyTorch's cuDNN SDPA on handgrad's packed layout with cuDNN's logs
#                    (the reference graphs for src/backend/cuda/cudnn_attention.c)
#   new              the checks first written without a GPU: the bias gradients in the
#                    GEMM epilogue, the classifier's bias and cap, the whole q/k norm,
#                    GeGLU, partial rotary, the attention cap and head size 256, the block
#                    layouts, NCCL following the backend's stream, the GEMM tuning
#                    experiment (their timings: bench-train's A/B variants); recompute
#                    (2026-11-28): its model checks and GPT-2 small's step in each mode;
#                    sliding windows (2026-11-28): the flash, row and KV-cache kernels'
#                    (test_cuda_ops attention_window) and three model checks; AdamW's
#                    moments in bf16 (2026-11-28): test_cuda_ops adamw_state, two model
#                    checks; packed documents (2026-11-28): test_cuda_ops attention_docs
#                    (encoder, rotary, flash and row kernels) and three model checks
#   cudnn            cuDNN's fused attention (cudnn_attention.c) and the deterministic
#                    path: the graphs planned with the driver, the attention op groups on
#                    both paths, the ordered token-embedding gradient (and its sanitizers),
#                    the bf16 model checks (which run on cuDNN), the deterministic runs,
#                    memcheck on the cuDNN path
#   check            GPU facts, the gpu-labelled tests (each op group, precision and
#                    model check in its own process), a GPT-2 small step    (~3 min)
#   bench-small      handgrad bench, GPT-2 small B=8 in bf16 and fp32 (the end of check)
#   sanitize         compute-sanitizer memcheck, initcheck, racecheck and synccheck on
#                    the op tests and a model step                            (~5 min)
#   ab               candidate modules (.gpu/alt/*.so) against the bundle's: checks,
#                    attention sweep, GPT-2 small step                      (~1 min each)
#   cli              handgrad train (GPT-2 small, bf16, on .gpu/data), --resume, generate
#   profile          Nsight Compute's time for each kernel of one GPT-2 small step, and
#                    handgrad profile's per-op table
#   prewarm          compiles bench-train's and bench-cpu's PyTorch workers once, so a
#                    later call on the same (warm) machine finds inductor's caches full
#   bench-train      GPT-2 small B=8/16/32 and cs336-small B=16: handgrad (with and
#                    without CUDA graphs; at B=8 also the bias gradients as column sums
#                    and the GEMM candidates timed) against torch.compile (and eager at
#                    two sizes), three interleaved rounds, per-round ratios, device
#                    memory from NVML on both sides (bench/compare_torch_cuda.py)
#   bench-cpu        the host CPU: handgrad --precision bf16 against PyTorch autocast,
#                    eager and compiled, GPT-2 small and cs336-small at B=4 T=256, three
#                    interleaved rounds at each of CPU_THREADS (default 2,16)
#   bench-attention  attention sweep: handgrad's two paths against SDPA's four backends,
#                    one timing and one memory method on both sides
#   seed-table       the CS336 benchmark's table of handgrad on the GPU (cs336-small, -medium)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
part=${1:?usage: scripts/gpu_session.sh session|facts|cudnn-ref|new|cudnn|check|bench-small|sanitize|ab|cli|profile|prewarm|bench-train|bench-cpu|bench-attention|seed-table}
out=${OUT:-gpu-out}
mkdir -p "$out"
[ -f .gpu/bundle.tar.gz ] || { echo "gpu_session: .gpu/ is missing: run scripts/gpu_bundle.sh here and carry .gpu"; exit 2; }
# unpacked once per bundle: parts, and sessions run side by side, share it
bin=/tmp/handgrad-gpu-$(md5sum <.gpu/bundle.tar.gz | cut -c1-12)
if [ ! -d "$bin" ]; then
  tmp=$(mktemp -d /tmp/handgrad-gpu.XXXXXX) && tar -xzf .gpu/bundle.tar.gz -C "$tmp" || exit 2
  mv -T "$tmp" "$bin" 2>/dev/null || rm -rf "$tmp" # another process got there first
fi
# cuBLASLt, cudart and NCCL (the CUDA module links them): the toolkit's, else PyTorch's wheels
pylibs=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for n in ("libcublasLt", "libcudart", "libnccl") for p in glob.glob(d + "/**/" + n + ".so*", recursive=True)})))' 2>/dev/null)
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${pylibs}:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
# the checks run what was written without a GPU, which the library otherwise refuses by
# name (src/backend/cuda/cuda.cu: cuda_supports)
export HANDGRAD_CUDA_UNTESTED=1
# one compile cache for every part and call, so prewarm's compiles serve bench-train's
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/hg-inductor}
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
failed=()
runone() { # runone LABEL CMD...: one process, its output appended to $log
  echo "==== $1" >>"$log"
  "${@:2}" >>"$log" 2>&1 || failed+=("$1 (exit $?)")
}
summary() { # summary WHAT: the failing checks and processes
  grep -E "^(====|  FAIL|=========)" "$log" | head -n 80
  echo "== $1: ${#failed[@]} failing process(es)"
  for f in "${failed[@]}"; do echo "   $f"; done
  [ ${#failed[@]} -eq 0 ] || status=1
}
cs() { compute-sanitizer --tool "$1" --error-exitcode 1 "${@:2}"; }
within() { # within SECONDS CMD...: CMD in a process group of its own, killed whole at the limit
  local t=$1; shift
  setsid "$@" &
  local pid=$!
  # the watcher keeps no pipe open (a tee downstream would wait for it) and ends its sleep
  (trap 'kill $s; exit' TERM; sleep "$t" & s=$!; wait $s; kill -TERM -- -"$pid"; sleep 5; kill -KILL -- -"$pid") \
    >/dev/null 2>&1 &
  local watch=$!
  wait "$pid"
  local rc=$?
  kill "$watch" 2>/dev/null
  return $rc
}
case $part in
session)
  # seconds each part may take; measured times go to docs/cuda.md ("A GPU session")
  declare -A limit=([facts]=30 [cudnn-ref]=90 [new]=150 [cudnn]=120 [check]=150 [sanitize]=120 [bench-train]=240
    [profile]=180 [bench-attention]=120 [bench-small]=90 [ab]=300 [cli]=180 [seed-table]=90 [prewarm]=240
    [bench-cpu]=300)
  for kv in ${SESSION_LIMITS:-}; do limit[${kv%%=*}]=${kv#*=}; done # "part=seconds ..." overrides
  logs=${SESSION_LOGS:-/tmp/gpu-logs} # a session running beside another names its own
  rm -rf "$logs" && mkdir -p "$logs"
  t_start=$SECONDS
  for p in ${SESSION_PARTS:-facts new check sanitize}; do
    [ -n "${limit[$p]:-}" ] || { echo "gpu_session: session: unknown part '$p'"; status=1; continue; }
    echo "== $(date -u +%H:%M:%S) part $p (limit ${limit[$p]} s, $((SECONDS - t_start)) s into the session)"
    t0=$SECONDS
    OUT=$logs/$p within "${limit[$p]}" "$0" "$p"
    rc=$?
    echo "== $(date -u +%H:%M:%S) part $p: exit $rc after $((SECONDS - t0)) s"
    [ $rc -eq 0 ] || status=1
    if [ "$p" = cudnn ] && [ -f "$logs/cudnn/default_failed" ]; then # the benchmarks after it: own kernels
      export HANDGRAD_CUDNN_ATTENTION=off
      echo "== cuDNN's attention failed its checks: HANDGRAD_CUDNN_ATTENTION=off for the parts after it"
    fi
    tar -czf "$out/logs.tar.gz" -C "$logs" .
  done 2>&1 | tee "$out/session.log"
  grep -q ': exit [^0]' "$out/session.log" && status=1
  ;;
facts)
  step gpu nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  step host sh -c 'grep -m1 "model name" /proc/cpuinfo; nproc; grep -o "avx512[a-z_0-9]*\|amx[a-z_0-9]*" /proc/cpuinfo | sort -u | tr "\n" " "; echo'
  step versions python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  # where a cuDNN lives there: the system's, the toolkit's, PyTorch's wheel (what the
  # cuDNN loader of the CUDA module searches)
  step mpi sh -c 'ls -l /lib/x86_64-linux-gnu/libmpi.so.40 2>&1; command -v mpirun orted || echo "no mpirun or orted"'
  step cudnn_where sh -c 'ldconfig -p | grep -i cudnn; ls -l /usr/local/cuda/lib64/libcudnn.so* 2>&1;
    python3 -c "import nvidia.cudnn, os; d = nvidia.cudnn.__path__[0]; print(d); [print(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs if f.startswith(\"libcudnn\")]"'
  ;;
cudnn-ref)
  # PyTorch's cuDNN SDPA at handgrad's layout, logged: cuDNN's backend log and
  # cudnn-frontend's graph log (compressed: the files back from a call are limited)
  step cudnn_ref env CUDNN_LOGINFO_DBG=1 CUDNN_LOGDEST_DBG="$out/cudnn_backend.log" CUDNN_FRONTEND_LOG_INFO=1 \
    CUDNN_FRONTEND_LOG_FILE="$out/cudnn_frontend.log" python3 tools/cudnn_sdpa_reference.py \
    --deviceprop "$out/cudnn_deviceprop.json"
  gzip -f "$out"/cudnn_backend.log "$out"/cudnn_frontend.log 2>/dev/null
  ls -l "$out"
  ;;
new)
  # written without a GPU on 2026-11-27 and 2026-11-28: the bias gradients in the dW GEMM's epilogue
  # (matmul group; HANDGRAD_CUDA_BGRAD=off: the column sums), the classifier's output bias
  # and logit cap, OLMo 2's whole q/k norm, GeGLU, partial rotary embeddings, the
  # attention cap and head size 256 (flash, row and KV-cache kernels), the block layouts'
  # model checks, NCCL following the backend's stream (MPI as a singleton, without
  # mpirun's daemon); then memcheck on the new paths and racecheck on the capped kernels
  log=$out/new.log
  : >"$log"
  for p in fp32 bf16; do
    for g in matmul classifier qk_norm activation rope attention attention_own attention_cached attention_window adamw_state attention_docs; do
      runone "ops $p $g" "$bin"/test_cuda_ops $p $g
    done
    runone "ops $p matmul, column sums" env HANDGRAD_CUDA_BGRAD=off "$bin"/test_cuda_ops $p matmul
  done
  for i in $("$bin"/test_cuda_model --list | grep -E 'sandwich|post-norm|parallel|recompute|LoRA|frozen|window|moments|documents' | cut -d: -f1); do
    runone "model $i" "$bin"/test_cuda_model "$i"
  done
  runone "nccl" env OMPI_MCA_ess_singleton_isolated=1 "$bin"/test_cuda_comm
  for g in matmul classifier; do runone "ops bf16 $g, GEMMs tuned" env HANDGRAD_CUDA_GEMM_TUNE=1 "$bin"/test_cuda_ops bf16 $g; done
  runone "model 1, GEMMs tuned" env HANDGRAD_CUDA_GEMM_TUNE=1 "$bin"/test_cuda_model 1
  for g in matmul classifier qk_norm attention_own attention_cached attention_window adamw_state attention_docs; do
    runone "memcheck ops bf16 $g" cs memcheck "$bin"/test_cuda_ops bf16 $g
  done
  for t in racecheck synccheck; do runone "$t ops bf16 attention_own" cs $t "$bin"/test_cuda_ops bf16 attention_own; done
  grep -E "GEMM epilogues|capped|hs=256|before the hand-over|following the backend|hg_dist over NCCL|skipped" "$log" | cut -c1-200
  summary new
  # written 2026-11-28: the step with each recompute mode (the backward runs forward ops again)
  for r in none attn mlp block; do
    printf 'recompute %s: ' "$r"
    "$bin"/handgrad bench --model small --batch 8 --ctx 1024 --device cuda --precision bf16 --warmup 2 --steps 5 \
      --pass step --recompute "$r" 2>&1 | grep -E '^small' || { echo "bench failed"; status=1; }
  done
  # written 2026-11-28: LoRA (lora.cu: cuBLASLt products, the CPU's dropout mask) and the
  # full fine-tune of the same model, bf16
  for a in "" "--lora r=16,alpha=32,dropout=0.05,targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"; do
    printf 'cs336-small %s: ' "${a:-full}"
    "$bin"/handgrad bench --model cs336-small --batch 8 --ctx 1024 --device cuda --precision bf16 --warmup 2 --steps 5 \
      --pass step $a 2>&1 | grep -E '^cs336' || { echo "bench failed"; status=1; }
  done
  ;;
cudnn)
  log=$out/cudnn.log
  : >"$log"
  runone "cudnn graphs, planned with the driver" "$bin"/test_cudnn_graph graphs tests/fixtures/cudnn/h200_deviceprop.json
  for p in bf16 fp32; do
    for g in attention attention_own encoder; do runone "ops $p $g" "$bin"/test_cuda_ops $p $g; done
  done
  for t in racecheck synccheck; do runone "$t ops bf16 encoder (ordered dwte)" cs $t "$bin"/test_cuda_ops bf16 encoder; done
  for i in $("$bin"/test_cuda_model --list | grep -E 'bf16|deterministic' | cut -d: -f1); do
    runone "model $i" "$bin"/test_cuda_model "$i"
  done
  # the experiment: cuDNN's backward without the dQ accumulator under --deterministic;
  # PyTorch's cuDNN (9.19) where there is one, which also takes the checks' odd T
  wheel=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(c.__path__[0], "lib", "libcudnn.so.9"))' 2>/dev/null)
  for i in $("$bin"/test_cuda_model --list | grep -E 'deterministic' | cut -d: -f1); do
    runone "model $i, cuDNN direct dQ" env HANDGRAD_CUDNN_DETERMINISTIC=1 ${wheel:+HANDGRAD_CUDNN=$wheel} \
      "$bin"/test_cuda_model "$i"
  done
  runone "ops bf16 attention_own, cuDNN direct dQ" env HANDGRAD_CUDNN_DETERMINISTIC=1 ${wheel:+HANDGRAD_CUDNN=$wheel} \
    "$bin"/test_cuda_ops bf16 attention_own
  [ -n "$wheel" ] && runone "ops bf16 attention, PyTorch's cuDNN" env HANDGRAD_CUDNN="$wheel" "$bin"/test_cuda_ops bf16 attention
  runone "memcheck ops bf16 attention (cuDNN)" cs memcheck "$bin"/test_cuda_ops bf16 attention
  grep -E 'kernels:|cuDNN 9' "$log" | sort | uniq -c | sort -rn | head -n 8
  # a failure outside the direct-dQ experiment turns cuDNN off for the session's later parts
  for f in "${failed[@]}"; do [[ $f == *"direct dQ"* ]] || : >"$out/default_failed"; done
  summary cudnn
  ;;
check)
  step gpu nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  step ldd ldd "$bin"/handgrad "$bin"/libhandgrad_cuda.so
  # each op group, precision and model check in a process of its own (a sticky CUDA error
  # ends a process), all logged to one file; the summary lists every failing process
  log=$out/tests.log
  : >"$log"
  for p in fp32 bf16; do
    for g in $("$bin"/test_cuda_ops --list); do runone "ops $p $g" "$bin"/test_cuda_ops $p "$g"; done
  done
  for p in fp32 bf16; do # the epilogues as separate kernels: the fallback path
    runone "ops $p matmul unfused" env HANDGRAD_CUDA_UNFUSED=1 "$bin"/test_cuda_ops $p matmul
  done
  for i in $(seq 0 $(($("$bin"/test_cuda_model --count) - 1))); do runone "model $i" "$bin"/test_cuda_model "$i"; done
  runone "model 1 unfused" env HANDGRAD_CUDA_UNFUSED=1 "$bin"/test_cuda_model 1
  summary tests
  ;&
bench-small)
  step bench_small "$bin"/handgrad bench --model small --batch 8 --ctx 1024 --device cuda --precision bf16 --warmup 2 --steps 5
  step bench_small_det "$bin"/handgrad bench --model small --batch 8 --ctx 1024 --device cuda --precision bf16 --warmup 2 \
    --steps 5 --deterministic
  step bench_small_det_cudnn env HANDGRAD_CUDNN_DETERMINISTIC=1 "$bin"/handgrad bench --model small --batch 8 --ctx 1024 \
    --device cuda --precision bf16 --warmup 2 --steps 5 --deterministic
  step bench_small_fp32 "$bin"/handgrad bench --model small --batch 8 --ctx 1024 --device cuda --precision fp32 --warmup 1 --steps 2
  ;;
sanitize)
  log=$out/sanitize.log
  : >"$log"
  for p in fp32 bf16; do runone "memcheck ops $p" cs memcheck "$bin"/test_cuda_ops $p; done
  runone "memcheck model 1 (odd bf16)" cs memcheck "$bin"/test_cuda_model 1
  runone "initcheck model 1" cs initcheck "$bin"/test_cuda_model 1
  for g in attention norm classifier; do
    for t in racecheck synccheck; do runone "$t ops bf16 $g" cs $t "$bin"/test_cuda_ops bf16 $g; done
  done
  runone "racecheck ops fp32 attention" cs racecheck "$bin"/test_cuda_ops fp32 attention
  summary sanitize
  ;;
ab)
  # candidate CUDA modules side by side in one lease: .gpu/alt/NAME.so (made by
  # scripts/gpu_bundle.sh from HG_ALT_MODULES) against the bundle's own module; for each,
  # the attention and two model checks, handgrad's attention sweep and a GPT-2 small step
  log=$out/ab.log
  : >"$log"
  for mod in "$bin"/libhandgrad_cuda.so "$bin"/alt/*.so; do
    [ -f "$mod" ] || continue
    name=$(basename "$mod" .so)
    export HANDGRAD_CUDA_MODULE=$mod
    for p in fp32 bf16; do runone "$name: ops $p attention" "$bin"/test_cuda_ops $p attention; done
    runone "$name: model 1 (odd bf16)" "$bin"/test_cuda_model 1
    runone "$name: model 12 (llama-tiny bf16)" "$bin"/test_cuda_model 12
    runone "$name: attention sweep" "$bin"/attention_cuda
    runone "$name: bench small" "$bin"/handgrad bench --model small --batch 8 --ctx 1024 --device cuda --precision bf16 \
      --warmup 2 --steps 10 --pass step
  done
  unset HANDGRAD_CUDA_MODULE
  grep -E '^(====|  FAIL)|"impl"|^small' "$log" | sed -E 's/"bytes": [0-9]+, //' | cut -c1-160
  echo "== ab: ${#failed[@]} failing process(es)"
  for f in "${failed[@]}"; do echo "   $f"; done
  ;;
cli)
  # the command line on the GPU: GPT-2 small trained in bf16 from token shards in
  # .gpu/data (handgrad prepare, made on the development machine), resumed, sampled
  [ -f .gpu/data/train_000000.bin ] || { echo "gpu_session: cli needs token shards in .gpu/data"; exit 2; }
  run=/tmp/hg-run
  rm -rf "$run"
  train=("$bin"/handgrad train --train '.gpu/data/train_*.bin' --val '.gpu/data/val_*.bin' --out "$run" --model small
    --tokenizer tests/fixtures/tokenizers/gpt2 --ctx 1024 --batch 8 --lr 6e-4 --warmup-steps 10 --eval-every 20
    --ckpt-every 20 --sample-every 0 --device cuda --precision bf16)
  step train_cli "${train[@]}" --max-steps 40
  step resume_cli "$bin"/handgrad train --resume --out "$run" --max-steps 60
  step generate_cli "$bin"/handgrad generate --model "$run" --prompt "And God said" --max-new-tokens 40 --device cuda \
    --precision bf16
  ;;
profile)
  # every kernel of one GPT-2 small bf16 step (B=8), timed by Nsight Compute, and
  # handgrad's own per-op table of the same step
  step profile ncu --metrics gpu__time_duration.sum --csv --print-units base \
    "$bin"/handgrad bench --model small --batch 8 --ctx 1024 --device cuda --precision bf16 --warmup 1 --steps 1 --pass step
  step profile_ops "$bin"/handgrad profile --model small --batch 8 --ctx 1024 --device cuda --precision bf16 --steps 2
  ;;
bench-train)
  # rows are printed as they complete (a run cut short keeps them); CONFIGS=MODEL:B,... narrows it
  python3 bench/compare_torch_cuda.py --part train --handgrad "$bin"/handgrad --out "$out" \
    ${CONFIGS:+--configs "$CONFIGS"} 2>"$out/train.err" | tee "$out/train.log" || status=1
  ;;
bench-cpu)
  # each thread count on the last cores of this part's affinity (2 threads: the last two)
  python3 bench/compare_torch_cuda.py --part cpu --handgrad "$bin"/handgrad --out "$out" \
    --threads "${CPU_THREADS:-2,16}" ${CPU_CONFIGS:+--configs "$CPU_CONFIGS"} ${CPU_CTX:+--ctx "$CPU_CTX"} \
    2>"$out/cpu.err" | tee "$out/cpu.log" || status=1
  ;;
prewarm)
  # the GPU's workers and the CPU's (unpinned, so their compiles use every core) at once
  python3 bench/compare_torch_cuda.py --part train --prewarm ${CONFIGS:+--configs "$CONFIGS"} \
    >"$out/prewarm_train.log" 2>&1 &
  python3 bench/compare_torch_cuda.py --part cpu --prewarm --threads "${CPU_THREADS:-2,16}" \
    ${CPU_CONFIGS:+--configs "$CPU_CONFIGS"} ${CPU_CTX:+--ctx "$CPU_CTX"} >"$out/prewarm_cpu.log" 2>&1
  wait
  grep -h '^ready' "$out"/prewarm_*.log | cut -c1-200
  ;;
seed-table)
  # the CS336 benchmark's table (Model, Pass, Warmup, Mean, Std) of handgrad on the GPU
  step seed_table python3 bench/compare_torch_cuda.py --seed-table --handgrad "$bin"/handgrad --steps 10
  ;;
bench-attention)
  # SWEEP_T, SWEEP_HS, SDPA_BACKENDS (comma-separated) narrow the sweep
  step attention python3 bench/compare_torch_cuda.py --part attention --attention-bin "$bin"/attention_cuda --out "$out" \
    ${SWEEP_T:+--sweep-t "$SWEEP_T"} ${SWEEP_HS:+--sweep-hs "$SWEEP_HS"} ${SDPA_BACKENDS:+--sdpa-backends "$SDPA_BACKENDS"}
  ;;
*) echo "gpu_session: unknown part '$part'"; exit 2 ;;
esac
exit $status
