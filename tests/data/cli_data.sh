#!/usr/bin/env bash
# End-to-end run of the data commands: train a tokenizer, encode and decode through
# it, prepare shards, and check that bad input fails with a message naming the file.
# Usage: cli_data.sh path/to/handgrad
set -euo pipefail
hg=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "cli_data: $*" >&2; exit 1; }

# A small generated corpus of three documents.
for i in $(seq 1 400); do
  echo "Line $i: the quick brown fox, it's $((i * 37 % 101)) jumps over the lazy dog."
  (( i % 150 == 0 )) && echo "<|endoftext|>"
done >"$work/corpus.txt"
printf 'caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 end\n' >>"$work/corpus.txt"

"$hg" tokenizer --help | grep "tokenizer train" >/dev/null || fail "no help" # grep -q could close the pipe early: SIGPIPE fails the pipeline
"$hg" tokenizer train --vocab-size 300 --out "$work/tok" "$work/corpus.txt" 2>"$work/train.log"
[[ -s "$work/tok/vocab.json" && -s "$work/tok/merges.txt" ]] || fail "train wrote no vocabulary"

# Round trip through text ids and binary ids, stdin and files.
"$hg" tokenizer encode --tokenizer "$work/tok" "$work/corpus.txt" >"$work/ids.txt"
"$hg" tokenizer decode --tokenizer "$work/tok" "$work/ids.txt" >"$work/back.txt"
cmp -s "$work/corpus.txt" "$work/back.txt" || fail "text round trip differs"
"$hg" tokenizer encode --binary --tokenizer "$work/tok/vocab.json" <"$work/corpus.txt" >"$work/ids.bin"
"$hg" tokenizer decode --binary --tokenizer "$work/tok" <"$work/ids.bin" | cmp -s - "$work/corpus.txt" ||
  fail "binary round trip differs"
# <|endoftext|> is ordinary text unless allowed.
eot=$(printf 'a<|endoftext|>b' | "$hg" tokenizer encode --allow-special --tokenizer "$work/tok" | awk '{print $2}')
[[ "$eot" == 299 ]] || fail "allow-special gave $eot, want 299"
printf 'a<|endoftext|>b' | "$hg" tokenizer encode --tokenizer "$work/tok" | grep -w 299 >/dev/null && fail "eot from plain text"

"$hg" prepare --quiet --tokenizer "$work/tok" --out "$work/shards" --val-fraction 0.1 --shard-tokens 2000 \
  "$work/corpus.txt" 2>"$work/prepare.log"
grep -q "3 documents\|4 documents" "$work/prepare.log" || fail "prepare: $(cat "$work/prepare.log")"
[[ -s "$work/shards/train_000000.bin" && -s "$work/shards/train_000001.bin" && -s "$work/shards/val_000000.bin" ]] ||
  fail "prepare wrote no shards"

# Bad input: a non-zero exit and a message that names the file.
expect_fail() {
  local what=$1 pattern=$2; shift 2
  if "$@" >/dev/null 2>"$work/err"; then fail "$what: succeeded"; fi
  grep -q -- "$pattern" "$work/err" || fail "$what: message '$(cat "$work/err")' lacks '$pattern'"
}
expect_fail "missing vocabulary" "nope.tiktoken" "$hg" tokenizer encode --tokenizer "$work/nope.tiktoken" "$work/corpus.txt"
head -c 300 "$work/tok/vocab.json" >"$work/tok_bad.json"
cp "$work/tok/merges.txt" "$work/merges.txt"
expect_fail "truncated vocab.json" "tok_bad.json:1: offset" "$hg" tokenizer encode --tokenizer "$work/tok_bad.json" "$work/corpus.txt"
: >"$work/empty.txt"
expect_fail "empty corpus" "empty.txt" "$hg" prepare --quiet --tokenizer "$work/tok" --out "$work/o2" "$work/empty.txt"
expect_fail "empty training corpus" "empty.txt" "$hg" tokenizer train --vocab-size 300 --out "$work/t2" "$work/empty.txt"
echo "1 2 x" >"$work/bad_ids.txt"
expect_fail "bad id text" "bad_ids.txt: offset 4" "$hg" tokenizer decode --tokenizer "$work/tok" "$work/bad_ids.txt"
# a tokenizer with neither <|endoftext|> nor a BOS: the message names the flag to give
expect_fail "no separator" "--separator: the tokenizer has neither" "$hg" prepare --quiet \
  --tokenizer "$(dirname "$0")/../fixtures/tokenizers/rules/tokenizer.json" --out "$work/o3" "$work/corpus.txt"
echo "cli_data: ok"
