#!/usr/bin/env bash
# Builds what a GPU session runs, here (no GPU needed), and packs it with the shared
# libraries the GPU machine lacks (oneDNN, PCRE2, cJSON, utf8proc, OpenCL's loader, libgomp) into
# .gpu/bundle.tar.gz (ignored by .gitignore; the device tool carries .gpu when a call names
# it). The CUDA module (libhandgrad_cuda.so) goes beside the programs, where the library
# looks for it. cuBLASLt, the CUDA runtime and NCCL are not packed: the GPU machine's
# toolkit or PyTorch's wheels have them.
# Portable ISA (no -march=native): the GPU machine's CPU is not this one.
# Usage: scripts/gpu_bundle.sh [build-dir]   (default build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-gpu}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DHANDGRAD_NATIVE=OFF -DHANDGRAD_CUDA=ON >/dev/null
targets=(handgrad_cli handgrad_cuda test_cuda_ops test_cuda_model test_cuda_comm attention_cuda)
grep -q test_cudnn_graph "$dir/Makefile" 2>/dev/null && targets+=(test_cudnn_graph) # where cuDNN's headers were found
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
cp "$dir/handgrad" "$dir/libhandgrad_cuda.so" "$dir/tests/test_cuda_ops" "$dir/tests/test_cuda_model" \
  "$dir/tests/test_cuda_comm" "$dir/bench/attention_cuda" "$stage/"
[ -f "$dir/tests/test_cudnn_graph" ] && cp "$dir/tests/test_cudnn_graph" "$stage/"
strip --strip-debug "$stage"/handgrad "$stage"/libhandgrad_cuda.so "$stage"/test_cuda_ops "$stage"/test_cuda_model \
  "$stage"/test_cuda_comm "$stage"/attention_cuda
# HG_ALT_MODULES="NAME=PATH ..." adds other builds of the CUDA module as alt/NAME.so, for
# scripts/gpu_session.sh ab (one lease comparing kernel versions)
mkdir -p "$stage/alt"
for alt in ${HG_ALT_MODULES:-}; do cp "${alt#*=}" "$stage/alt/${alt%%=*}.so" && strip --strip-debug "$stage/alt/${alt%%=*}.so"; done
for lib in libdnnl.so.2 libpcre2-8.so.0 libcjson.so.1 libutf8proc.so.2 libOpenCL.so.1 libgomp.so.1; do
  path=$(ldd "$stage/handgrad" | awk -v l="$lib" '$1 == l { print $3 }')
  [ -n "$path" ] && cp -L "$path" "$stage/lib/"
done
# compressed: the working tree and what a call carries share a 64 MiB limit
rm -rf .gpu
mkdir -p .gpu
tar -czf .gpu/bundle.tar.gz -C "$stage" .
du -sh .gpu
echo "carry .gpu with the run: scripts/gpu_session.sh check|sanitize|bench-train|bench-attention"
