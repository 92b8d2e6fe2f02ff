#!/usr/bin/env bash
# End-to-end runs of `handgrad generate` and `handgrad export` on the tiny Hugging Face
# fixture and on a 3-step `handgrad train` checkpoint: greedy text equals transformers'
# (with the KV cache and without), seeds repeat, stdin and --prompt agree, long prompts
# are cut, an export generates the same text; bad input fails with one line naming the
# flag or file and leaves nothing behind.
# Usage: cli_generate.sh path/to/handgrad   (run from tests/)
set -euo pipefail
hg=$1
fix=fixtures/hf_tiny
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "cli_generate: $*" >&2; exit 1; }
prompt="And God said, Let there be light"

"$hg" generate --help | grep -q -- "--max-new-tokens" || fail "no help"

# Greedy continuation: the bytes transformers' greedy ids stand for, plus a newline.
{ cat fixtures/hf_tiny_greedy.bin; echo; } >"$work/want"
for cache in "" --no-cache; do
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
head -c ${#prompt} "$work/a" | grep -qx -- "$prompt" || fail "prompt not echoed"

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
expect_fail "export no --hf" "needs --model and --hf" "$hg" export --model $fix
echo "cli_generate: ok"
