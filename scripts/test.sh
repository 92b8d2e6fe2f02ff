#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite:
#  1. the release build under ctest;
#  2. the same suite built with AddressSanitizer + UBSan;
#  3. every libFuzzer target for a short run (FUZZ_SECONDS, default 15).
# The release build includes the CUDA backend when nvcc is found (it compiles and links
# here; its tests, label gpu, skip without a GPU); the instrumented builds leave it out.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
scripts/fetch_gpt2_vocab.sh   # assets/gpt2.tiktoken for the GPT-2 tokenizer test

scripts/build.sh build
(cd build && ctest --output-on-failure -j1)

scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHANDGRAD_SANITIZE=ON -DHANDGRAD_CUDA=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j1 -LE slow)

scripts/build.sh build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DHANDGRAD_FUZZ=ON -DHANDGRAD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHANDGRAD_CUDA=OFF
scripts/fuzz.sh build-fuzz "${FUZZ_SECONDS:-15}"
echo "all tests passed"
