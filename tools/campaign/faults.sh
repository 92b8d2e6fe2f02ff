# The fault part of the campaign: runs of `handgrad train` killed (-9, at random and in
# the middle of checkpoint writes and prunes), interrupted (SIGINT, twice, SIGTERM),
# out of disk space, at learning rates up to 1e9 and with NaN injected, two writers on
# one folder, and MPI ranks killed and frozen. After each, the run is resumed to its end
# and compared with an uninterrupted reference: the last checkpoint's weights and AdamW
# state byte for byte, and every step and eval record of train.jsonl (timing fields
# aside) present once, in order, with the same values. Sourced by campaign.sh.

F=faults
RUN_ARGS=() # set by faults_setup

# The records of a train.jsonl without their timing fields.
records() { sed -E 's/, "(seconds|tokens_per_s)": [^,}]*//g' "$1/train.jsonl" | grep -E '"type": "(step|eval)"'; }

# same_as NAME DIR REF: records the comparison of run folder DIR with reference REF.
same_as() {
  local name=$1 dir=$2 ref=$3 last f lost
  last=$(basename "$(ls -d "$ref"/ckpt_[0-9]* | tail -n 1)")
  for f in model optimizer; do
    if ! cmp -s "$dir/$last/$f.safetensors" "$ref/$last/$f.safetensors"; then
      record $F "$name" "$BUILD" wrong "$last/$f.safetensors differs from the uninterrupted run's"
      return 1
    fi
  done
  lost=$(diff <(records "$ref") <(records "$dir") | grep -c '^[<>]')
  LOG_RECORDS=$((LOG_RECORDS + $(records "$ref" | wc -l)))
  if [[ $lost -ne 0 ]]; then
    LOST_RECORDS=$((LOST_RECORDS + lost))
    record $F "$name" "$BUILD" wrong "train.jsonl: $lost record(s) missing, repeated or different"
    return 1
  fi
  record $F "$name" "$BUILD" ok "bit-exact"
}

# finish NAME DIR REF [CMD PREFIX...]: resumes DIR to its end (runs whatever remains) and
# compares it with REF; a resume that fails is recorded with its message.
finish() {
  local name=$1 dir=$2 ref=$3
  shift 3
  run_limited 300 "$LOGS/$F.$name.resume.$BUILD" "$@" "$HG" train "${RUN_ARGS[@]}" --resume --out "$dir"
  local outcome
  outcome=$(judge accept "" "$LOGS/$F.$name.resume.$BUILD")
  if [[ $outcome != ok ]]; then
    record $F "$name" "$BUILD" "$outcome" "resume: rc $RC: $(head -n 1 "$LOGS/$F.$name.resume.$BUILD.err")"
    return 1
  fi
  same_as "$name" "$dir" "$ref"
}

faults_setup() {
  mkdir -p "$WORK/f"
  RUN_ARGS=(--model tiny --tokenizer "$DATA/tok" --train "$DATA/shards/train_*.bin" --val "$DATA/shards/val_*.bin"
            --batch 4 --ctx 32 --threads 1 --peak-gflops 100 --max-steps 60 --ckpt-every 5 --keep-last 3
            --eval-every 10 --eval-batches 2 --print-every 1)
  "$HG" train "${RUN_ARGS[@]}" --out "$WORK/f/ref.$BUILD" >"$LOGS/ref.$BUILD.log" 2>&1 || {
    echo "campaign: the reference run failed ($BUILD): $(tail -n 3 "$LOGS/ref.$BUILD.log")" >&2
    exit 1
  }
  REF_RUN=$WORK/f/ref.$BUILD
  local t0=$EPOCHREALTIME
  "$HG" train "${RUN_ARGS[@]}" --out "$WORK/f/ref2.$BUILD" >/dev/null 2>&1
  REF_SECONDS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
  rm -rf "$WORK/f/ref2.$BUILD"
  echo "  reference run ($BUILD): ${REF_SECONDS}s"
}

# Sleeps a random time in [0, $1) seconds (a float).
random_sleep() { sleep "$(awk -v r=$RANDOM -v t="$1" 'BEGIN { printf "%.4f", r / 32768 * t }')"; }

# kill_once DIR MODE: starts (or resumes) the run in DIR and kills it with SIGKILL:
# MODE random (at a random time), tmp (in a checkpoint write) or del (in a prune). Sets
# MID when the kill left a checkpoint write part way (a ckpt_*.tmp folder).
kill_once() {
  local dir=$1 mode=$2 pid kpid
  "$HG" train "${RUN_ARGS[@]}" --resume --out "$dir" >>"$dir.log" 2>&1 &
  pid=$!
  case $mode in
    random) random_sleep "$REF_SECONDS"; kill -9 $pid 2>/dev/null ;;
    tmp | del)
      "$KILLER" $pid "$dir" ".$mode" $((RANDOM % 3000)) &
      kpid=$!
      ;;
  esac
  wait $pid 2>/dev/null
  local rc=$?
  [[ -n ${kpid:-} ]] && { kill $kpid 2>/dev/null; wait $kpid 2>/dev/null; }
  KILLS=$((KILLS + (rc == 137)))
  MID=0
  compgen -G "$dir/ckpt_*.tmp" >/dev/null && MID=1
  compgen -G "$dir/ckpt_*.del" >/dev/null && MID=2
  if [[ $rc -ne 137 && $rc -ne 0 ]] || sanitizer_report "$dir.log"; then
    record $F "kill-$(basename "$dir")" "$BUILD" crash "rc $rc before the kill: $(tail -n 2 "$dir.log")"
  fi
}

faults_kill() { # faults_kill COUNT: COUNT runs, each killed once or twice, then resumed
  local i n=$1 mode dir
  for ((i = 1; i <= n; i++)); do
    case $((i % 3)) in 0) mode=random ;; 1) mode=tmp ;; 2) mode=del ;; esac
    dir=$WORK/f/kill.$BUILD.$i
    rm -rf "$dir" "$dir.log"
    kill_once "$dir" $mode
    MID_TMP=$((MID_TMP + (MID == 1))); MID_DEL=$((MID_DEL + (MID == 2)))
    if ((RANDOM % 2)); then kill_once "$dir" random; fi
    finish "kill-$mode-$i" "$dir" "$REF_RUN"
  done
}

faults_signals() {
  local i sig dir pid rc
  for i in 1 2 3 4 5 6; do
    sig=INT; ((i == 3 || i == 6)) && sig=TERM
    dir=$WORK/f/sig.$BUILD.$i; rm -rf "$dir"
    "$HG" train "${RUN_ARGS[@]}" --out "$dir" >"$dir.log" 2>&1 &
    pid=$!
    random_sleep "$REF_SECONDS"
    kill -$sig $pid 2>/dev/null
    wait $pid; rc=$?
    if [[ $rc -ne 0 && $rc -ne 130 && $rc -ne 143 ]] || sanitizer_report "$dir.log"; then
      record $F "sig$sig-$i" "$BUILD" crash "rc $rc: $(tail -n 2 "$dir.log")"; continue
    fi
    # a signal before the handler is installed ends the process at once (nothing written
    # yet); once it has said "stopping after this step", the run must say how to go on
    if grep -q "stopping after this step" "$dir.log" && ! grep -qE "Continue with: handgrad train --resume --out|before the first step|^done: " "$dir.log"; then
      record $F "sig$sig-$i" "$BUILD" unnamed "stopped (rc $rc) without the resume command: $(tail -n 1 "$dir.log")"
      continue
    fi
    finish "sig$sig-$i" "$dir" "$REF_RUN"
  done
  for i in 1 2 3 4; do # a second SIGINT aborts at once
    dir=$WORK/f/sig2.$BUILD.$i; rm -rf "$dir"
    "$HG" train "${RUN_ARGS[@]}" --out "$dir" >"$dir.log" 2>&1 &
    pid=$!
    random_sleep "$REF_SECONDS"
    kill -INT $pid 2>/dev/null; sleep 0.00$((RANDOM % 9)); kill -INT $pid 2>/dev/null
    wait $pid; rc=$?
    if sanitizer_report "$dir.log" || [[ $rc -ne 0 && $rc -ne 130 ]]; then
      record $F "sigINT-twice-$i" "$BUILD" crash "rc $rc: $(tail -n 2 "$dir.log")"; continue
    fi
    finish "sigINT-twice-$i" "$dir" "$REF_RUN"
  done
}

faults_disk() {
  if ! unshare -rm true 2>/dev/null; then
    record $F disk-full "$BUILD" skipped "no user namespace to mount a small tmpfs in"
    return
  fi
  local kb dir rc fill name
  # a tmpfs too small for the run (the failure lands where the space runs out), or a
  # large one filled up at a random moment of the run (it lands on whatever writes next:
  # the log, a checkpoint); the folder is then copied out and resumed
  for kb in 48 160 400 900 1400 2000 2600 3300 4100 5200 6400 fill fill fill fill fill fill; do
    fill=""
    [[ $kb == fill ]] && fill=$((1 + RANDOM % 55)) kb=16384
    name=disk-${kb}k${fill:+-full-at-step-$fill}
    dir=$WORK/f/$name.$BUILD; rm -rf "$dir" "$WORK/f/mnt"; mkdir -p "$WORK/f/mnt"
    unshare -rm bash -c 'mount -t tmpfs -o size="$1"k tmpfs "$2" || exit 1
                         "${@:5}" --out "$2/run" >"$3.log" 2>&1 & p=$!
                         if [[ -n $4 ]]; then # at step $4 of the log
                           while [[ $(cat "$2/run/train.jsonl" 2>/dev/null | wc -l) -lt $4 ]] && kill -0 $p; do sleep 0.002; done
                           dd if=/dev/zero of="$2/filler" bs=64k status=none 2>/dev/null
                         fi
                         wait $p; echo $? >"$3.rc"; cp -a "$2/run" "$3" 2>/dev/null || mkdir -p "$3"' \
      _ "$kb" "$WORK/f/mnt" "$dir" "$fill" "$HG" train "${RUN_ARGS[@]}" ${fill:+--ckpt-every 30}
    rc=$(cat "$dir.rc")
    if sanitizer_report "$dir.log" || [[ $rc -gt 1 ]]; then
      record $F "$name" "$BUILD" crash "rc $rc: $(tail -n 2 "$dir.log")"; continue
    fi
    if [[ $rc -eq 1 ]] && ! grep -qE "No space left on device|File too large" "$dir.log"; then
      record $F "$name" "$BUILD" unnamed "rc 1 without saying the disk is full: $(tail -n 2 "$dir.log")"; continue
    fi
    [[ $rc -eq 1 ]] && DISK_FULL=$((DISK_FULL + 1)) &&
      grep -q "train.jsonl: writing the log failed" "$dir.log" && DISK_LOG=$((DISK_LOG + 1))
    finish "$name" "$dir" "$REF_RUN"
  done
}

faults_divergence() {
  local lr dir rc ck bad
  for lr in 1e-3 1e-2 0.1 1 10 100 1e3 1e4 1e5 1e6 1e7 1e8 1e9; do
    dir=$WORK/f/lr.$BUILD.$lr; rm -rf "$dir"
    run_limited 300 "$dir" "$HG" train "${RUN_ARGS[@]}" --out "$dir" --lr "$lr" --weight-decay 0
    rc=$RC
    if [[ $(judge accept "" "$dir") == hang ]] || sanitizer_report "$dir.err" || [[ $rc -gt 1 ]]; then
      record $F "lr-$lr" "$BUILD" crash "rc $rc: $(tail -n 2 "$dir.err")"; continue
    fi
    bad=""
    if [[ $rc -eq 1 ]]; then
      # stopped: it names the newest checkpoint from before the loss left the band, which
      # must generate, or says none was written
      ck=$(cat "$dir.out" "$dir.err" | grep -oE "from before that: (ckpt_[0-9]{8}|none was written)" | sed 's/.*: //')
      if [[ -z $ck ]]; then bad="stopped without naming a checkpoint from before: $(tail -n 1 "$dir.out")"
      elif [[ $ck != none* ]] && ! "$HG" generate --model "$dir/$ck" --prompt "the" --max-new-tokens 2 --threads 1 \
             >/dev/null 2>"$dir.gen"; then bad="$ck does not generate: $(head -n 1 "$dir.gen")"
      fi
    fi
    for ck in "$dir"/ckpt_[0-9]*; do # the others load (finite, whole); garbage may give NaN logits
      [[ -d $ck ]] || continue
      "$HG" generate --model "$ck" --prompt "the" --max-new-tokens 2 --threads 1 >/dev/null 2>"$dir.gen"
      local g=$?
      if [[ $g -gt 1 ]] || sanitizer_report "$dir.gen" || { [[ $g -eq 1 ]] && ! grep -q "logits" "$dir.gen"; }; then
        bad="$(basename "$ck"): generate rc $g: $(head -n 1 "$dir.gen")"
      fi
    done
    [[ -z $bad ]] && record $F "lr-$lr" "$BUILD" ok "rc $rc" || record $F "lr-$lr" "$BUILD" wrong "$bad"
  done
  local spec
  for spec in 3 1 3,4 10,11,12,13 20,21,22,23,24 59,60 5,15,25,35; do
    dir=$WORK/f/nan.$BUILD.$spec; rm -rf "$dir"
    run_limited 300 "$dir" "$HG" train "${RUN_ARGS[@]}" --out "$dir" --inject-nan "$spec"
    local n got
    n=$(tr ',' '\n' <<<"$spec" | wc -l)
    got=$(grep -c '"skipped": true' "$dir/train.jsonl" 2>/dev/null)
    if [[ $(judge accept "" "$dir") == hang ]] || sanitizer_report "$dir.err" || [[ $RC -gt 1 ]]; then
      record $F "nan-$spec" "$BUILD" crash "rc $RC: $(tail -n 2 "$dir.err")"
    elif [[ $n -ge 5 && $RC -ne 1 ]] || [[ $n -lt 5 && $RC -ne 0 ]]; then
      record $F "nan-$spec" "$BUILD" wrong "rc $RC after $n poisoned step(s) in a row"
    elif [[ $got -ne $n ]]; then
      record $F "nan-$spec" "$BUILD" wrong "$got skipped step record(s) for $n poisoned step(s)"
    else
      record $F "nan-$spec" "$BUILD" ok "rc $RC, $got skipped"
    fi
  done
}

faults_writers() {
  local i dir a b rc
  for i in 1 2 3 4 5; do
    dir=$WORK/f/writers.$BUILD.$i; rm -rf "$dir"
    "$HG" train "${RUN_ARGS[@]}" --out "$dir" >"$dir.a.log" 2>&1 &
    a=$!
    random_sleep "$(awk -v t="$REF_SECONDS" 'BEGIN { print t / 2 }')"
    run_limited 60 "$dir.b" "$HG" train "${RUN_ARGS[@]}" --resume --out "$dir" --lr 0.01
    rc=$RC
    wait $a
    local ra=$?
    if [[ $rc -eq 0 ]] && ! kill -0 $a 2>/dev/null && [[ ! -s $dir.b.err ]]; then
      # the first run had ended before the second started: nothing to refuse
      record $F "writers-$i" "$BUILD" ok "the first run had finished"; continue
    fi
    if [[ $rc -eq 0 ]]; then record $F "writers-$i" "$BUILD" silent "a second writer ran"
    elif ! grep -q "pid" "$dir.b.err"; then record $F "writers-$i" "$BUILD" unnamed "$(head -n 1 "$dir.b.err")"
    elif [[ $ra -ne 0 ]]; then record $F "writers-$i" "$BUILD" wrong "the first run failed: rc $ra"
    else same_as "writers-$i" "$dir" "$REF_RUN"
    fi
  done
}

faults_mpi() {
  command -v mpirun >/dev/null || { record $F mpi "$BUILD" skipped "no mpirun"; return; }
  local mpi=(mpirun --oversubscribe -n 2)
  [[ $(id -u) -eq 0 ]] && mpi=(mpirun --oversubscribe --allow-run-as-root -n 2)
  local ref=$WORK/f/mpiref.$BUILD
  rm -rf "$ref"
  "${mpi[@]}" "$HG" train "${RUN_ARGS[@]}" --out "$ref" >"$ref.log" 2>&1 ||
    { record $F mpi-reference "$BUILD" wrong "$(tail -n 2 "$ref.log")"; return; }
  local i dir pid rc victim start name
  local kinds=(kill stall freeze)
  for i in 1 2 3 4 5 6 7 8 9; do
    name=mpi-${kinds[$((i % 3))]}-$i
    dir=$WORK/f/mpi.$BUILD.$i; rm -rf "$dir"
    "${mpi[@]}" "$HG" train "${RUN_ARGS[@]}" --out "$dir" --dist-timeout 5 >"$dir.log" 2>&1 &
    pid=$!
    sleep 0.3; random_sleep "$REF_SECONDS"
    victim=$(pgrep -f -- "--out $dir --dist-timeout" | grep -v "^$pid\$" | sed -n "$((1 + RANDOM % 2))p")
    [[ -n $victim ]] || { wait $pid; record $F "$name" "$BUILD" ok "finished before a rank could be hit"; continue; }
    start=$SECONDS
    case $((i % 3)) in
      0) kill -9 "$victim" ;;                                        # a rank dies
      1) kill -STOP "$victim"; sleep 2; kill -CONT "$victim" ;;      # a rank stalls, then goes on
      2) kill -STOP "$victim" ;;                                     # a rank freezes for good
    esac
    # the ranks that were not hit must end within 90 s (a frozen one never does by itself:
    # it is killed then, as an operator would)
    local live
    live=$(pgrep -f -- "--out $dir --dist-timeout" | grep -v -e "^$pid\$" -e "^$victim\$")
    while [[ -n $live ]] && ((SECONDS - start < 90)); do
      sleep 0.5
      live=$(for p in $live; do kill -0 "$p" 2>/dev/null && echo "$p"; done)
    done
    ((i % 3 == 2)) && [[ -z $live ]] && kill -9 "$victim" 2>/dev/null
    while kill -0 $pid 2>/dev/null && ((SECONDS - start < 90)); do sleep 0.5; done
    if kill -0 $pid 2>/dev/null; then
      record $F "$name" "$BUILD" hang "${live:+a rank not hit is }still running 90 s after the fault"
      pkill -9 -f -- "--out $dir --dist-timeout"; kill -9 $pid; wait $pid; continue
    fi
    wait $pid; rc=$?
    pkill -9 -f -- "--out $dir --dist-timeout" 2>/dev/null
    if sanitizer_report "$dir.log"; then record $F "$name" "$BUILD" sanitizer "$(grep -m1 -E 'runtime error|Sanitizer' "$dir.log")"; continue; fi
    if ((i % 3 == 1)) && [[ $rc -ne 0 ]]; then
      record $F "$name" "$BUILD" wrong "a 2 s stall of one rank failed the run: rc $rc"; continue
    fi
    if ((i % 3 == 2)) && ! grep -qi "rank" "$dir.log"; then
      record $F "$name" "$BUILD" unnamed "a frozen rank: $(tail -n 1 "$dir.log")"; continue
    fi
    finish "$name" "$dir" "$ref" "${mpi[@]}"
  done
}

faults_all() {
  faults_setup
  faults_kill "$1"
  faults_signals
  faults_disk
  faults_divergence
  faults_writers
  [[ $BUILD == release ]] && faults_mpi
  cd "$WORK" || exit 1
}
