# Helpers of the fault and bad-input campaign (tools/campaign/campaign.sh): running a
# command under a time limit, judging its outcome, counting, and editing files in
# place (safetensors headers, shard headers, single floats). Sourced, not run.

# Every outcome goes to $RESULTS as "part<TAB>case<TAB>build<TAB>outcome<TAB>detail".
# The outcomes: ok, and the failures hang, crash, sanitizer, silent (bad input taken
# without a word), unnamed (refused without naming the file, field or tensor), wrong
# (another failure: a resume that is not bit-exact, a lost log record, a run that
# should have finished and did not).
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5:-}" >>"$RESULTS"; }

# run_limited SECONDS PREFIX CMD...: runs CMD with stdout in PREFIX.out and stderr in
# PREFIX.err; RC is its status (124: the limit was hit).
run_limited() {
  local t=$1 p=$2
  shift 2
  timeout -k 5 "$t" "$@" >"$p.out" 2>"$p.err" </dev/null
  RC=$?
}

sanitizer_report() { grep -qE 'runtime error:|ERROR: (Address|Leak)Sanitizer|SUMMARY: UndefinedBehaviorSanitizer' "$@"; }

# The outcome of a finished command, RC and PREFIX.err, against EXPECT: refuse (exit 1
# or 2, stderr naming PATTERN), warn (exit 0, stderr naming PATTERN) or accept (exit 0).
judge() {
  local expect=$1 pattern=$2 p=$3
  if [[ $RC -eq 124 || $RC -eq 137 ]]; then echo hang
  elif sanitizer_report "$p.err"; then echo sanitizer
  elif [[ $RC -gt 2 ]]; then echo crash
  elif [[ $expect == refuse && $RC -eq 0 ]]; then echo silent
  elif [[ $expect != refuse && $RC -ne 0 ]]; then echo wrong
  elif [[ $expect != accept ]] && ! grep -qF -- "$pattern" "$p.err"; then
    [[ $expect == warn ]] && echo silent || echo unnamed
  else echo ok
  fi
}

# expect PART CASE EXPECT PATTERN CMD...: runs CMD (60 s at most) in the current folder
# and records its outcome; the detail is stderr's first line.
expect() {
  local part=$1 name=$2 want=$3 pattern=$4
  shift 4
  local p="$LOGS/$part.$name.$BUILD"
  run_limited "${CASE_SECONDS:-60}" "$p" "$@"
  local outcome
  outcome=$(judge "$want" "$pattern" "$p")
  record "$part" "$name" "$BUILD" "$outcome" "rc $RC: $(head -c 300 "$p.err" | head -n 1)"
  [[ $outcome == ok ]] || echo "  $part/$name ($BUILD): $outcome, rc $RC: $(head -n 3 "$p.err")" >&2
}

# ---- editing files ----

le64() { # the 8 little-endian bytes of $1
  local v=$1 i s=""
  for i in 0 1 2 3 4 5 6 7; do s+=$(printf '\\x%02x' $(((v >> (8 * i)) & 255))); done
  printf "$s"
}
u64_at() { od -An -tu8 -j "$2" -N8 "$1" | tr -d ' '; }
# put FILE OFFSET: writes stdin over FILE's bytes at OFFSET.
put() { dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

st_header_len() { u64_at "$1" 0; }
st_header() { dd if="$1" iflag=skip_bytes,count_bytes skip=8 count="$(st_header_len "$1")" bs=64K status=none; }
# st_edit FILE SED-SCRIPT: rewrites a safetensors file's JSON header through sed, the
# data unchanged.
st_edit() {
  local f=$1 n
  n=$(st_header_len "$f")
  st_header "$f" | sed -e "$2" >"$f.head" # a file: the header may come out with a NUL
  { le64 "$(stat -c %s "$f.head")"; cat "$f.head"; tail -c +$((9 + n)) "$f"; } >"$f.edit" && mv "$f.edit" "$f"
  rm -f "$f.head"
}
# st_offset FILE TENSOR: the file offset of TENSOR's first byte.
st_offset() {
  local b
  b=$(st_header "$1" | grep -o "\"$2\":{[^}]*}" | sed 's/.*"data_offsets":\[\([0-9]*\),.*/\1/')
  echo $((8 + $(st_header_len "$1") + b))
}
# st_bf16 FILE TENSOR INDEX HEX: the same for a BF16 tensor, HEX its 16 bits (7fc0: a NaN).
st_bf16() {
  local off
  off=$(($(st_offset "$1" "$2") + 2 * $3))
  printf "$(printf '\\x%s\\x%s' "${4:2:2}" "${4:0:2}")" | put "$1" "$off"
}
# st_float FILE TENSOR INDEX HEX: sets element INDEX of an F32 tensor to the float whose
# bits are HEX (e.g. 7fc00000, a NaN).
st_float() {
  local off
  off=$(($(st_offset "$1" "$2") + 4 * $3))
  printf "$(printf '\\x%s\\x%s\\x%s\\x%s' "${4:6:2}" "${4:4:2}" "${4:2:2}" "${4:0:2}")" | put "$1" "$off"
}
