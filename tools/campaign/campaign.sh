#!/usr/bin/env bash
# The fault and bad-input campaign against the release and ASan+UBSan builds:
#  - every libFuzzer target for --fuzz-seconds (default 180) each, from the committed
#    seed corpora, one at a time beside the rest;
#  - malformed inputs (malformed.sh): damaged checkpoints, shards, configs,
#    tokenizers, Hugging Face folders and flags, each refused naming what is wrong;
#  - faults (faults.sh): kill -9 at random and in the middle of checkpoint writes and
#    prunes, SIGINT, a second SIGINT, SIGTERM, a full disk (a small tmpfs), learning
#    rates up to 1e9, injected NaN, two writers on one folder, MPI ranks killed, stalled
#    and frozen; every interrupted run is resumed and compared bit for bit with an
#    uninterrupted one, its train.jsonl record by record.
# It counts crashes, hangs, silent acceptances, unnamed refusals, sanitizer reports,
# lost log records and resumes that are not bit-exact; each must be 0. The table goes to
# stdout and OUT/results.tsv has every case. Exit status 1 when any count is not 0.
#
# Usage: tools/campaign/campaign.sh [--quick] [--fuzz-seconds S] [--kills N] [--seed N]
#                                   [--out DIR] [--skip fuzz,malformed,faults]
#   --quick: 10 kills, 5 fuzz seconds, the release build only (a few minutes).
# The builds are the test suite's (build, build-asan, build-fuzz; made if missing).
# A full run took 35 minutes on a 2-core VM (docs/testing.md).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
fuzz_seconds=180 kills=50 seed=1 out="" quick=0 skip=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 fuzz_seconds=5 kills=10 ;;
    --fuzz-seconds) fuzz_seconds=$2; shift ;;
    --kills) kills=$2; shift ;;
    --seed) seed=$2; shift ;;
    --out) out=$2; shift ;;
    --skip) skip=$2; shift ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "campaign: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
RANDOM=$seed
WORK=${out:-$(mktemp -d /tmp/hg-campaign.XXXXXX)}
[[ -f $WORK/results.tsv ]] && rm -rf "${WORK:?}"/* # an earlier campaign's folder
mkdir -p "$WORK/logs" && WORK=$(cd "$WORK" && pwd)
LOGS=$WORK/logs RESULTS=$WORK/results.tsv
: >"$RESULTS"
KILLS=0 MID_TMP=0 MID_DEL=0 DISK_FULL=0 DISK_LOG=0 LOG_RECORDS=0 LOST_RECORDS=0
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
. "$root/tools/campaign/lib.sh"
. "$root/tools/campaign/malformed.sh"
. "$root/tools/campaign/faults.sh"
skipping() { [[ ,$skip, == *,$1,* ]]; }
echo "campaign: $WORK (seed $seed)"

builds=(release)
[[ $quick -eq 0 ]] && builds+=(asan)
for b in "${builds[@]}"; do
  dir=build; flags=()
  [[ $b == asan ]] && dir=build-asan flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DHANDGRAD_SANITIZE=ON -DHANDGRAD_CUDA=OFF)
  [[ -x $root/$dir/handgrad ]] || "$root/scripts/build.sh" "$dir" "${flags[@]}" >"$LOGS/build.$b.log" 2>&1 ||
    { echo "campaign: building $dir failed: $LOGS/build.$b.log" >&2; exit 1; }
done
KILLER=$WORK/killer
cc -O2 -o "$KILLER" "$root/tools/campaign/killer.c" || exit 1

# The fuzzers run one at a time in the background, beside the rest (one thread).
fuzz_pid=""
if ! skipping fuzz; then
  if [[ ! -d $root/build-fuzz/fuzz ]]; then
    "$root/scripts/build.sh" build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DHANDGRAD_FUZZ=ON \
      -DHANDGRAD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHANDGRAD_CUDA=OFF >"$LOGS/build.fuzz.log" 2>&1 ||
      { echo "campaign: building build-fuzz failed: $LOGS/build.fuzz.log" >&2; exit 1; }
  fi
  (
    for bin in "$root"/build-fuzz/fuzz/fuzz_*; do
      [[ -x $bin ]] || continue
      name=$(basename "$bin") corpus=$WORK/fuzz/${name#fuzz_}
      mkdir -p "$corpus" "$WORK/fuzz/crashes"
      [[ -d $root/fuzz/corpus/${name#fuzz_} ]] && cp -r "$root/fuzz/corpus/${name#fuzz_}"/. "$corpus"/
      "$bin" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$WORK/fuzz/crashes/$name-" "$corpus" >"$LOGS/fuzz.$name.log" 2>&1
    done
  ) &
  fuzz_pid=$!
fi

# Shared inputs: a corpus, its tokenizer and shards, a finished run, a Hugging Face folder.
DATA=$WORK/data
mkdir -p "$DATA"
for i in $(seq 1 400); do echo "Line $i: the quick brown fox, it's $((i * 37 % 101)) jumps over the lazy dog."; done >"$DATA/corpus.txt"
"$root/build/handgrad" tokenizer train --vocab-size 300 --out "$DATA/tok" "$DATA/corpus.txt" >/dev/null 2>&1 &&
  "$root/build/handgrad" prepare --quiet --tokenizer "$DATA/tok" --out "$DATA/shards" --val-fraction 0.1 \
    --shard-tokens 4000 "$DATA/corpus.txt" >/dev/null 2>&1 || { echo "campaign: preparing the data failed" >&2; exit 1; }
TRAIN_ARGS=(--model tiny --tokenizer "$DATA/tok" --train "$DATA/shards/train_*.bin" --batch 4 --ctx 32 --threads 1
            --peak-gflops 100 --max-steps 10)
REF=$WORK/ref_run
"$root/build/handgrad" train "${TRAIN_ARGS[@]}" --ckpt-every 5 --out "$REF" >/dev/null 2>&1 ||
  { echo "campaign: the reference run failed" >&2; exit 1; }
HF=$root/tests/fixtures/hf_tiny

for BUILD in "${builds[@]}"; do
  HG=$root/build/handgrad
  [[ $BUILD == asan ]] && HG=$root/build-asan/handgrad
  if ! skipping malformed; then echo "malformed inputs ($BUILD)"; malformed_all; fi
  n=$kills
  [[ $BUILD == asan ]] && n=$((kills * 2 / 5)) && n=$((n < 1 ? 1 : n))
  [[ $BUILD == release ]] && n=$((kills - (quick ? 0 : kills * 2 / 5)))
  if ! skipping faults; then echo "faults ($BUILD)"; faults_all "$n"; fi
done

if [[ -n $fuzz_pid ]]; then
  echo "waiting for the fuzzers"
  wait "$fuzz_pid"
  for log in "$LOGS"/fuzz.*.log; do
    name=$(basename "$log" .log); name=${name#fuzz.}
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
    FUZZ_RUNS=$((${FUZZ_RUNS:-0} + ${runs:-0}))
    if grep -qE 'ERROR: libFuzzer|SUMMARY: (Address|Undefined|Leak)|runtime error|deadly signal|Test unit written' "$log"; then
      record fuzz "$name" fuzz crash "$(grep -m1 -E 'ERROR|SUMMARY|runtime error|deadly' "$log")"
    else
      record fuzz "$name" fuzz ok "${runs:-0} runs"
    fi
  done
fi

# ---- the table ----
count() { awk -F'\t' -v p="$1" -v o="$2" '($1 == p || p == "") && ($4 == o || o == "") { n++ } END { print n + 0 }' "$RESULTS"; }
echo
echo "| part | cases | ok | crash | hang | sanitizer | silent | unnamed | wrong | skipped |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for part in fuzz malformed faults ""; do
  printf '| %s |' "${part:-all}"
  for o in "" ok crash hang sanitizer silent unnamed wrong skipped; do printf ' %s |' "$(count "$part" "$o")"; done
  echo
done
echo
echo "fuzz: ${FUZZ_RUNS:-0} executions over $(count fuzz "") targets, ${fuzz_seconds}s each"
echo "malformed: $(awk -F'\t' '$1 == "malformed" { print $2 }' "$RESULTS" | sort -u | wc -l) distinct inputs, each on ${#builds[@]} build(s)"
echo "kill -9: $KILLS kills; $MID_TMP left a checkpoint write part way, $MID_DEL a prune part way"
echo "full disk: $DISK_FULL runs stopped by it, $DISK_LOG of them at a train.jsonl write"
echo "train.jsonl: $LOST_RECORDS of $LOG_RECORDS records lost, repeated or changed across resumes"
bad=$(awk -F'\t' '$4 != "ok" && $4 != "skipped"' "$RESULTS" | wc -l)
echo "failures: $bad (details: $RESULTS)"
[[ $bad -eq 0 && $LOST_RECORDS -eq 0 ]]
