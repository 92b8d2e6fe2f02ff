#!/usr/bin/env bash
# End-to-end runs of `handgrad generate` and `handgrad export` on the tiny Hugging Face
# fixture and on a 3-step `handgrad train` checkpoint: greedy text equals transformers'
# (with the KV cache and without), seeds repeat, stdin and --prompt agree, long prompts
# are cut, an export generates the same text; --num-samples, --stop and
# --repetition-penalty do what --help says; --device cpu --precision fp32 are the
# defaults; bad input (--device cuda without a usable GPU among it) fails
# with one line naming the flag or file (usage errors with exit status 2) and leaves
# nothing behind.
# Usage: cli_generate.sh path/to/handgrad   (run from tests/)
set -euo pipefail
hg=$1
fix=fixtures/hf_tiny
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "cli_generate: $*" >&2; exit 1; }
prompt="And God said, Let there be light"

"$hg" generate --help | grep -- "--max-new-tokens" >/dev/null || fail "no help"
for flag in "--device cpu|cuda" "--precision fp32|bf16"; do
  "$hg" generate --help | grep -- "$flag" >/dev/null || fail "$flag not in --help"
done

# Greedy continuation: the bytes transformers' greedy ids stand for, plus a newline.
{ cat fixtures/hf_tiny_greedy.bin; echo; } >"$work/want"
for cache in "" --no-cache "--device cpu --precision fp32"; do
  "$hg" generate --model $fix --prompt "$prompt" --temperature 0 --max-new-tokens 12 --no-echo --threads 2 $cache \
    >"$work/got" 2>"$work/log"
  cmp -s "$work/got" "$work/want" || fail "greedy ${cache:-with cache}: $(od -c "$work/got" | head -3)"
  grep -q "12 prompt tokens.*12 new tokens.*tokens/s" "$work/log" || fail "no rate: $(cat "$work/log")"
done

# Sampling: a seed repeats; another seed differs; stdin is the same prompt as --prompt.
run() { "$hg" generate --model $fix --max-new-tokens 40 --ignore-eot --threads 2 "$@" 2>/dev/null; }
run --prompt "$prompt" --seed 5 --top-k 50 --top-p 0.9 >"$work/a"
run --prompt "$prompt" --seed 5 --top-k 50 --top-p 0.9 >"$work/b"
run --prompt "$prompt" --seed 6 --top-k 50 --top-p 0.9 >"$work/c"
printf '%s' "$prompt" | run --seed 5 --top-k 50 --top-p 0.9 >"$work/d"
cmp -s "$work/a" "$work/b" || fail "same seed, different text"
cmp -s "$work/a" "$work/c" && fail "different seeds, same text"
cmp -s "$work/a" "$work/d" || fail "stdin and --prompt differ"
head -c ${#prompt} "$work/a" | grep -x -- "$prompt" >/dev/null || fail "prompt not echoed"
"$hg" generate --help | grep -- "--seed S" >/dev/null || fail "--seed not in --help"
# the sampling defaults of generate and of train's samples are one (help lines joined)
for cmd in generate train; do
  "$hg" $cmd --help | tr '\n' ' ' | tr -s ' ' >"$work/help_$cmd"
  grep -- "--top-k K sample among the K most likely tokens; 0: all (default 40)" "$work/help_$cmd" >/dev/null ||
    fail "$cmd: --top-k's default is not 40"
  grep -- "--temperature X sampling temperature; 0 is greedy (default 0.8)" "$work/help_$cmd" >/dev/null ||
    fail "$cmd: --temperature's default is not 0.8"
done

# --num-samples: the samples follow one another with a line of 15 dashes between two; the
# first is the text of a single sample with the same seed, the second another; the seed
# repeats them all. Greedy samples are all the same text, with the prompt's prefill
# reused (or computed again after the context slid: below).
export LC_ALL=C # byte-wise ${var:offset:length} below
sep=---------------
run --prompt "$prompt" --seed 5 --num-samples 2 >"$work/n2"
run --prompt "$prompt" --seed 5 --num-samples 2 >"$work/n2b"
run --prompt "$prompt" --seed 5 >"$work/n1"
cmp -s "$work/n2" "$work/n2b" || fail "--num-samples: the same seed gives different text"
[[ $(grep -c -x -- "$sep" "$work/n2") == 1 ]] || fail "--num-samples 2: not one separator: $(cat "$work/n2")"
size1=$(wc -c <"$work/n1")
head -c "$size1" "$work/n2" | cmp -s - "$work/n1" || fail "--num-samples: the first sample is not the seed's single sample"
tail -c +$((size1 + 1)) "$work/n2" | sed -n 1p | grep -x -- "$sep" >/dev/null || fail "--num-samples: no separator after sample 1"
tail -c +$((size1 + ${#sep} + 2)) "$work/n2" >"$work/n2_second"
head -c ${#prompt} "$work/n2_second" | grep -x -- "$prompt" >/dev/null || fail "--num-samples: sample 2 does not echo the prompt"
cmp -s "$work/n2_second" "$work/n1" && fail "--num-samples: both samples are the same text"
gen0() { "$hg" generate --model $fix --temperature 0 --max-new-tokens 40 --ignore-eot --threads 2 "$@" 2>/dev/null; }
gen0 --prompt "$prompt" >"$work/g1"
{ cat "$work/g1"; echo "$sep"; cat "$work/g1"; echo "$sep"; cat "$work/g1"; } >"$work/g3_want"
for cache in "" --no-cache; do
  gen0 --prompt "$prompt" --num-samples 3 $cache >"$work/g3"
  cmp -s "$work/g3" "$work/g3_want" || fail "--num-samples 3 greedy ${cache:-with cache}: samples differ"
done

# --stop: the new text ends just before the first stop string, found across tokens and
# held back while it could still be the start of one ("rth" comes twice before "rthsa"
# does); a string that is not there changes nothing, even one that starts as the text
# ends; each sample stops on its own.
run --prompt "$prompt" --seed 5 --no-echo >"$work/s0"
full=$(cat "$work/s0")
[[ $(wc -c <"$work/s0") == $((${#full} + 1)) ]] || fail "--stop: the fixture's text has NUL bytes or ends in a newline"
stop=${full:24:5} want=${full%%"$stop"*}
[[ ${#want} -ge 10 && ${#want} -lt ${#full} ]] || fail "--stop: '$stop' is not inside the fixture's text: $full"
run --prompt "$prompt" --seed 5 --no-echo --stop "$stop" >"$work/s1"
cmp -s "$work/s1" <(printf '%s\n' "$want") || fail "--stop '$stop': got '$(cat "$work/s1")', want '$want'"
run --prompt "$prompt" --seed 5 --stop "not in the text" --stop "$stop" >"$work/s2"
cmp -s "$work/s2" <(printf '%s%s\n' "$prompt" "$want") || fail "--stop with the prompt echoed: '$(cat "$work/s2")'"
run --prompt "$prompt" --seed 5 --no-echo --stop "${full: -2}~~" --stop "${full:7:3}"$'\x01' >"$work/s3"
cmp -s "$work/s3" "$work/s0" || fail "--stop that never matches: '$(cat "$work/s3")'"
gfull=$(gen0 --prompt "$prompt" --no-echo)
gstop=${gfull:5:3} gwant=${gfull%%"$gstop"*}
gen0 --prompt "$prompt" --no-echo --num-samples 2 --stop "$gstop" >"$work/s4"
cmp -s "$work/s4" <(printf '%s\n%s\n%s\n' "$gwant" "$sep" "$gwant") || fail "--stop per sample: '$(cat "$work/s4")'"

# --repetition-penalty: 1 changes nothing; 1.3 turns this model's greedy loops into
# other text, the same with the cache and without.
gen0 --prompt "$prompt" --repetition-penalty 1 >"$work/p1"
cmp -s "$work/p1" "$work/g1" || fail "--repetition-penalty 1 changed the text"
gen0 --prompt "$prompt" --repetition-penalty 1.3 >"$work/p2"
gen0 --prompt "$prompt" --repetition-penalty 1.3 --no-cache >"$work/p3"
cmp -s "$work/p2" "$work/g1" && fail "--repetition-penalty 1.3 did not change the greedy text"
cmp -s "$work/p2" "$work/p3" || fail "--repetition-penalty: cached and uncached differ"
[[ $(grep -o y "$work/p2" | wc -l) -lt $(grep -o y "$work/g1" | wc -l) ]] || fail "--repetition-penalty: no fewer repeats"

# A prompt longer than the context is cut from the left with a warning; a full context
# goes on from its last half; the cached and uncached runs still agree.
long=$(for i in $(seq 30); do printf 'And the evening and the morning were the first day. '; done)
"$hg" generate --model $fix --prompt "$long" --ctx 16 --max-new-tokens 30 --temperature 0 --ignore-eot \
  >"$work/l1" 2>"$work/log" || fail "long prompt: $(cat "$work/log")"
grep -q "warning: the prompt has [0-9]* tokens but the context holds 16; keeping the last 16" "$work/log" ||
  fail "no cut warning: $(cat "$work/log")"
"$hg" generate --model $fix --prompt "$long" --ctx 16 --max-new-tokens 30 --temperature 0 --ignore-eot --no-cache \
  >"$work/l2" 2>/dev/null
cmp -s "$work/l1" "$work/l2" || fail "sliding context: cached and uncached differ"
# An empty prompt starts from <|endoftext|>.
"$hg" generate --model $fix --prompt "" --max-new-tokens 5 --ignore-eot >/dev/null 2>&1 || fail "empty prompt"
# --num-samples when the context slid: the prompt's prefill is computed again.
gen0 --prompt "$long" --ctx 16 --max-new-tokens 30 --num-samples 2 >"$work/l3"
cmp -s "$work/l3" <(cat "$work/l1"; echo "$sep"; cat "$work/l1") || fail "--num-samples after a full context: samples differ"

# Export, then generate from the export: the same text.
"$hg" export --model $fix --hf "$work/out" 2>/dev/null || fail "export"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
  [[ -s "$work/out/$f" ]] || fail "export wrote no $f"
done
"$hg" generate --model "$work/out" --prompt "$prompt" --temperature 0 --max-new-tokens 12 --no-echo >"$work/got" 2>/dev/null
cmp -s "$work/got" "$work/want" || fail "greedy from the export differs"

# A checkpoint of `handgrad train`: the run folder, its checkpoint folder and the weights
# file give the same text, with and without the cache; so does its export.
for i in $(seq 200); do echo "And God said, Let there be light: and there was light. Verse $i."; done >"$work/c.txt"
"$hg" prepare --quiet --tokenizer $fix --out "$work/shards" --val-fraction 0.1 "$work/c.txt" 2>/dev/null
"$hg" train --train "$work/shards/train_*.bin" --out "$work/run" --model tiny --tokenizer $fix --ctx 32 --batch 2 \
  --max-steps 3 --threads 2 >/dev/null 2>&1 || fail "train"
ckpt=$(ls -d "$work"/run/ckpt_*)
gen() { "$hg" generate --prompt "$prompt" --temperature 0 --max-new-tokens 40 --ignore-eot --threads 2 "$@" 2>/dev/null; }
gen --model "$work/run" >"$work/r1"
gen --model "$ckpt" --no-cache >"$work/r2"
gen --model "$ckpt/model.safetensors" >"$work/r3"
cmp -s "$work/r1" "$work/r2" && cmp -s "$work/r1" "$work/r3" || fail "checkpoint paths or cache give different text"
"$hg" export --model "$work/run" --hf "$work/run_hf" 2>/dev/null || fail "export of a checkpoint"
gen --model "$work/run_hf" >"$work/r4"
cmp -s "$work/r1" "$work/r4" || fail "the export of a checkpoint generates different text"
"$hg" export --model "$work/run" --hf "$work/run_sh" --max-shard-size 20KiB 2>/dev/null || fail "export in shards"
shards=("$work"/run_sh/model-*-of-*.safetensors)
[[ -s "$work/run_sh/model.safetensors.index.json" && ${#shards[@]} -gt 1 && -s "${shards[1]}" &&
   ! -e "$work/run_sh/model.safetensors" ]] || fail "export in shards: no index or second shard"
gen --model "$work/run_sh" >"$work/r5"
cmp -s "$work/r1" "$work/r5" || fail "the export in shards generates different text"

# Bad input: non-zero exit, one line naming the flag or file.
expect_fail() {
  local what=$1 pattern=$2; shift 2
  if "$@" >"$work/out.txt" 2>"$work/err" </dev/null; then fail "$what: succeeded"; fi
  grep -q -- "$pattern" "$work/err" || fail "$what: message '$(cat "$work/err")' lacks '$pattern'"
  [[ $(grep -c . "$work/err") == 1 ]] || fail "$what: more than one line: $(cat "$work/err")"
}
g=(generate --model $fix --prompt x)
expect_fail "unknown flag" "unknown option '--temprature'" "$hg" "${g[@]}" --temprature 1
expect_fail "bad top-k" "--top-k: 'many' is not an integer" "$hg" "${g[@]}" --top-k many
expect_fail "negative temperature" "--temperature: '-1' is not a number" "$hg" "${g[@]}" --temperature -1
expect_fail "top-p above 1" "--top-p: '1.5'" "$hg" "${g[@]}" --top-p 1.5
# A usage error: exit status 2 and one line naming the option.
expect_usage() {
  local what=$1 pattern=$2 st=0; shift 2
  "$@" >"$work/out.txt" 2>"$work/err" </dev/null || st=$?
  [[ $st == 2 ]] || fail "$what: exit status $st, want 2 ($(cat "$work/err"))"
  grep -q -- "$pattern" "$work/err" || fail "$what: message '$(cat "$work/err")' lacks '$pattern'"
  [[ $(grep -c . "$work/err") == 1 ]] || fail "$what: more than one line: $(cat "$work/err")"
  [[ ! -s "$work/out.txt" ]] || fail "$what: printed text"
}
expect_usage "unknown flag, status" "unknown option" "$hg" "${g[@]}" --temprature 1
expect_usage "bad top-k, status" "--top-k: 'many'" "$hg" "${g[@]}" --top-k many
expect_usage "no --num-samples value" "option '--num-samples' needs a value" "$hg" "${g[@]}" --num-samples
expect_usage "bad --num-samples" "--num-samples: 'two' is not an integer in \[1, 1000000\]" "$hg" "${g[@]}" --num-samples two
expect_usage "--num-samples 0" "--num-samples: '0' is not an integer" "$hg" "${g[@]}" --num-samples 0
expect_usage "--num-samples too many" "--num-samples: '1000001'" "$hg" "${g[@]}" --num-samples 1000001
expect_usage "no --stop value" "option '--stop' needs a value" "$hg" "${g[@]}" --stop
expect_usage "bad --max-shard-size" "--max-shard-size: '5XB' is not a size" "$hg" export --model $fix --hf "$work/o3" \
  --max-shard-size 5XB
expect_usage "empty --stop" "--stop: the stop string is empty" "$hg" "${g[@]}" --stop ""
many=(); for i in $(seq 17); do many+=(--stop "s$i"); done
expect_usage "17 --stop" "--stop: at most 16 values" "$hg" "${g[@]}" "${many[@]}"
expect_usage "no --repetition-penalty value" "option '--repetition-penalty' needs a value" "$hg" "${g[@]}" --repetition-penalty
for x in high 0 -1.5 100.5 nan inf 1.2x; do
  expect_usage "--repetition-penalty $x" "--repetition-penalty: '$x' is not a number in (0, 100\]" \
    "$hg" "${g[@]}" --repetition-penalty "$x"
done
# bf16 on the CPU generates, through the KV cache and without it
for cache in "" --no-cache; do
  "$hg" "${g[@]}" --precision bf16 --temperature 0 --max-new-tokens 8 --ignore-eot --no-echo $cache >"$work/out.txt" \
    2>"$work/err" </dev/null || fail "bf16 on the CPU $cache: $(cat "$work/err")"
  [[ -s "$work/out.txt" ]] || fail "bf16 on the CPU $cache: printed nothing"
  grep -q "8 new tokens" "$work/err" || fail "bf16 on the CPU $cache: $(cat "$work/err")"
done
expect_usage "bad --device" "--device: 'gpu' is not cpu or cuda" "$hg" "${g[@]}" --device gpu
# --device cuda where it cannot run: a module that loads nowhere, and this machine's GPU
# unless it has one (a checkpoint as well as a Hugging Face folder)
for model in $fix "$work/run"; do
  expect_fail "no CUDA module" "--device cuda: " env HANDGRAD_CUDA_MODULE=/nonexistent/libhandgrad_cuda.so \
    "$hg" generate --model "$model" --prompt x --device cuda
  if ! nvidia-smi -L >/dev/null 2>&1; then
    expect_fail "no GPU" "--device cuda: " "$hg" generate --model "$model" --prompt x --device cuda --precision bf16
  fi
done
expect_fail "ctx above n_positions" "--ctx 65 is longer than the model.s context (64 positions)" "$hg" "${g[@]}" --ctx 65
expect_fail "no model" "--model is required" "$hg" generate --prompt x
expect_fail "missing model" "--model $work/nope" "$hg" generate --model "$work/nope" --prompt x
mkdir "$work/badcfg" && cp $fix/* "$work/badcfg/"
sed -i 's/"n_layer": 2/"n_layer": 3/' "$work/badcfg/config.json"
expect_fail "config vs weights" "badcfg/model.safetensors: tensor 'h.2.ln_1.weight' is missing" \
  "$hg" generate --model "$work/badcfg" --prompt x
cp $fix/config.json "$work/badcfg/"
head -c 100000 $fix/model.safetensors >"$work/badcfg/model.safetensors"
expect_fail "truncated weights" "badcfg/model.safetensors: tensor .* lie outside" "$hg" generate --model "$work/badcfg" --prompt x
printf 'In the beginning God created the heaven and the earth.\n' >"$work/corpus.txt"
big=fixtures/tokenizers/llama3 # more ids than the model (fewer would be padded embedding rows)
expect_fail "tokenizer vocab" "--tokenizer $big: the tokenizer has 419 ids but the model's vocab_size is 320" \
  "$hg" "${g[@]}" --tokenizer "$big"
mkdir "$work/notok" && cp $fix/config.json $fix/model.safetensors "$work/notok/"
expect_fail "no tokenizer" "no tokenizer beside the model in $work/notok (give --tokenizer)" \
  "$hg" generate --model "$work/notok" --prompt x
expect_fail "export over a folder" "out: exists and is not an empty folder" "$hg" export --model $fix --hf "$work/out"
expect_fail "export tokenizer" "the tokenizer has 419 ids" "$hg" export --model $fix --hf "$work/o2" --tokenizer "$big"
[[ ! -e "$work/o2" && ! -e "$work/o2.tmp" ]] || fail "a refused export left files"
expect_fail "export unwritable" "cannot create" "$hg" export --model $fix --hf "$work/corpus.txt/x"
expect_fail "export no --hf" "needs --model, and --hf or --peft" "$hg" export --model $fix
echo "cli_generate: ok"
