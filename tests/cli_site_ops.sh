#!/usr/bin/env bash
# An op plugin in the handgrad command (--ops, examples/layerscale_ops.c): `ops` lists
# and gradient-checks it; profile names it in its tables and Chrome trace; train saves
# checkpoints that name it, which resume with the plugin loaded and are refused by name
# without it; a bad plugin path fails naming it. A rule plugin (examples/gelu_rule_ops.c)
# replaces a built-in's backward in every model the command creates, through a model hook.
# Usage: cli_site_ops.sh path/to/handgrad path/to/liblayerscale_ops.so path/to/libgelu_rule_ops.so
# (run from tests/)
set -euo pipefail
hg=$1
ops=$2
rule=$3
fix=fixtures/hf_tiny
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "cli_site_ops: $*" >&2; exit 1; }
expect_fail() {
  local what=$1 pattern=$2; shift 2
  if "$@" >"$work/out.txt" 2>"$work/err" </dev/null; then fail "$what: succeeded"; fi
  grep -q -- "$pattern" "$work/err" || fail "$what: message '$(cat "$work/err")' lacks '$pattern'"
}
arch=(--model tiny --arch op_attn_proj=layerscale)

# ops: the plugin's op listed and gradient-checked
"$hg" --ops "$ops" ops --check >"$work/ops" 2>&1 || fail "ops --check: $(cat "$work/ops")"
grep -q "^layerscale at op_attn_proj (N=8, 64 -> 64): 1 parameters gamma (64)" "$work/ops" || fail "ops: $(cat "$work/ops")"
grep -q "gradient check: ok" "$work/ops" || fail "ops --check: $(cat "$work/ops")"

# profile: one row per pass in the per-op table, the op's events in the trace
"$hg" --ops "$ops" profile "${arch[@]}" --batch 2 --ctx 32 --steps 1 --threads 2 --trace "$work/t.json" \
  >"$work/prof" 2>&1 || fail "profile: $(cat "$work/prof")"
grep -Eq "^ .* 2 .*layerscale forward$" "$work/prof" || fail "no 'layerscale forward' row: $(cat "$work/prof")"
grep -Eq "^ .* 2 .*layerscale backward$" "$work/prof" || fail "no 'layerscale backward' row"
[[ $(grep -o '"name":"layerscale backward"' "$work/t.json" | wc -l) == 2 ]] || fail "trace lacks the op's events"
expect_fail "profile without the plugin" "op_attn_proj: op 'layerscale' is not registered" \
  "$hg" profile "${arch[@]}" --batch 2 --ctx 32 --steps 1
expect_fail "missing plugin" "--ops $work/none.so" "$hg" --ops "$work/none.so" profile --model tiny
expect_fail "not a plugin" "libm.so.6: the module has no handgrad_ops_init" "$hg" --ops libm.so.6 profile --model tiny

# a rule plugin: GELU's backward replaced in profile's model (2 layers; a warm-up step and
# 2 profiled ones), and in train's
"$hg" --ops "$rule" profile --model tiny --batch 2 --ctx 32 --steps 2 --threads 2 >"$work/rule" 2>&1 ||
  fail "profile with the rule: $(cat "$work/rule")"
grep -q "^gelu_rule_ops: the GELU backward rule ran 6 times$" "$work/rule" || fail "rule plugin: $(cat "$work/rule")"
grep -Eq "^ .* 4 .*gelu backward$" "$work/rule" || fail "no 'gelu backward' row: $(cat "$work/rule")"

# train: the checkpoint names the op and holds its parameters; resume needs the plugin
for i in $(seq 200); do echo "And God said, Let there be light: and there was light. Verse $i."; done >"$work/c.txt"
"$hg" prepare --quiet --tokenizer $fix --out "$work/shards" --val-fraction 0.1 "$work/c.txt" 2>/dev/null
train=(train --train "$work/shards/train_*.bin" --out "$work/run" "${arch[@]}" --tokenizer $fix --ctx 32 --batch 2
  --threads 2)
"$hg" --ops "$ops" "${train[@]}" --max-steps 3 >"$work/log" 2>&1 || fail "train: $(cat "$work/log")"
ckpt=$(ls -d "$work"/run/ckpt_*)
grep -qF '\"op_attn_proj\":\"layerscale\"' "$ckpt/model.safetensors" || fail "the checkpoint's config does not name the op"
grep -q 'h.1.layerscale.gamma' "$ckpt/model.safetensors" || fail "the checkpoint lacks the op's parameters"
expect_fail "resume without the plugin" "op 'layerscale' is not registered" "$hg" train --resume --out "$work/run" --max-steps 5
"$hg" --ops "$ops" train --resume --out "$work/run" --max-steps 5 >"$work/log" 2>&1 || fail "resume: $(cat "$work/log")"
ls -d "$work"/run/ckpt_00000005 >/dev/null || fail "resume wrote no step-5 checkpoint"
echo "cli_site_ops: ok"
