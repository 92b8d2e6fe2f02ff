# The malformed-input part of the campaign: each case damages one file or flag in a
# fresh copy of a good run folder (or of the data) and runs the command that reads it.
# A case passes when the command refuses the input with a message naming the file,
# field, tensor or flag (or, for the few inputs that are legal, warns or accepts as
# documented), without a crash, a hang or a sanitizer report. Sourced by campaign.sh,
# which sets HG, BUILD, DATA (corpus, tokenizer, shards), REF (a finished run folder),
# HF (a Hugging Face folder) and the helpers of lib.sh.

M=malformed
# fresh NAME: a new case folder holding a copy of the reference run as ./run; cd there.
fresh() {
  CASE=$WORK/cases/$BUILD/$1
  rm -rf "$CASE" && mkdir -p "$CASE" && cp -r "$REF" "$CASE/run" && cd "$CASE" || exit 1
}
newest() { ls -d run/ckpt_[0-9]* | tail -n 1; }
resume() { expect $M "$1" "$2" "$3" "$HG" train --resume --out run --threads 1 --peak-gflops 100 --max-steps 12 "${@:4}"; }
new_run() { expect $M "$1" "$2" "$3" "$HG" train "${TRAIN_ARGS[@]}" --out new "${@:4}"; }

malformed_model_file() {
  local f hl size c
  # truncations of the newest checkpoint's weights, at every structural boundary
  fresh probe; f=$(newest)/model.safetensors; hl=$(st_header_len "$f"); size=$(stat -c %s "$f")
  for c in 0 4 8 $((8 + hl / 2)) $((8 + hl)) $((8 + hl + 4)) $(((size + 8 + hl) / 2)) $((size - 1)); do
    fresh "model-trunc-$c"; truncate -s "$c" "$(newest)/model.safetensors"
    resume "model-trunc-$c" refuse model.safetensors
  done
  fresh model-extra-byte; printf x >>"$(newest)/model.safetensors"; resume model-extra-byte refuse model.safetensors
  for v in 0 18446744073709551615 9223372036854775807 $((size)); do
    fresh "model-hlen-$v"; f=$(newest)/model.safetensors; le64 "$v" | put "$f" 0
    resume "model-hlen-$v" refuse model.safetensors
  done
  # the header's JSON
  local -A edits=(
    [not-json]='s/^{/[/'
    [nul]='s/"format"/"for\x00at"/'
    [dtype-f16]='0,/"dtype":"F32"/s//"dtype":"F16"/'
    [dtype-unknown]='0,/"dtype":"F32"/s//"dtype":"Q9"/'
    [shape-swapped]='s/"shape":\[300,64\]/"shape":[64,300]/'
    [shape-negative]='s/"shape":\[300,64\]/"shape":[-300,64]/'
    [shape-huge]='s/"shape":\[300,64\]/"shape":[4611686018427387904,4]/'
    [offsets-past-end]='s/"data_offsets":\[0,76800\]/"data_offsets":[0,99999999]/'
    [offsets-backwards]='s/"data_offsets":\[0,76800\]/"data_offsets":[76800,0]/'
    [offsets-overlap]='s/"data_offsets":\[76800,93184\]/"data_offsets":[76796,93180]/'
    [offsets-float]='s/"data_offsets":\[0,76800\]/"data_offsets":[0.5,76800]/'
    [offsets-1e30]='s/"data_offsets":\[0,76800\]/"data_offsets":[0,1e30]/'
    [duplicate-name]='s/"transformer.wpe.weight"/"transformer.wte.weight"/'
    [missing-tensor]='s/"transformer.ln_f.bias"/"transformer.ln_f.bais"/'
    [config-n_layer-5.5e40]='s/\\"n_layer\\":2/\\"n_layer\\":5.5e40/'
    [config-n_layer-neg]='s/\\"n_layer\\":2/\\"n_layer\\":-2/'
    [config-n_layer-string]='s/\\"n_layer\\":2/\\"n_layer\\":\\"2\\"/'
    [config-vocab-0]='s/\\"vocab_size\\":300/\\"vocab_size\\":0/'
    [config-not-json]='s/"config":"{/"config":"{{/'
    [config-gone]='s/"config":"{[^"]*\(\\"[^"]*\)*"/"configx":"1"/'
    [config-norm-unknown]='s/\\"norm\\":\\"layernorm\\"/\\"norm\\":\\"batchnorm\\"/'
    [config-eps-nan]='s/\\"norm_eps\\":9.99999975e-06/\\"norm_eps\\":1e999/'
  )
  local -A named=(
    [config-n_layer-5.5e40]=n_layer [config-n_layer-neg]=n_layer [config-n_layer-string]=n_layer
    [config-vocab-0]=vocab_size [config-norm-unknown]=norm [config-eps-nan]=norm_eps
    [duplicate-name]=transformer.wte.weight [missing-tensor]=ln_f.bias
  )
  for c in "${!edits[@]}"; do
    fresh "model-$c"; st_edit "$(newest)/model.safetensors" "${edits[$c]}"
    resume "model-$c" refuse "${named[$c]:-model.safetensors}"
  done
  # values
  for v in 7fc00000 7f800000 ff800000; do
    fresh "model-value-$v"; st_float "$(newest)/model.safetensors" transformer.h.1.mlp.c_fc.weight 77 "$v"
    resume "model-value-$v" refuse transformer.h.1.mlp.c_fc.weight
  done
}

malformed_optimizer_file() {
  local f c
  fresh probe; f=$PWD/$(newest)/optimizer.safetensors
  local size; size=$(stat -c %s "$f")
  for c in 0 100 $((size / 2)); do
    fresh "opt-trunc-$c"; truncate -s "$c" "$(newest)/optimizer.safetensors"
    resume "opt-trunc-$c" refuse optimizer.safetensors
  done
  fresh opt-gone; rm "$(newest)/optimizer.safetensors"; resume opt-gone refuse optimizer.safetensors
  local t m v
  t=$(st_header "$f" | grep -o '"[^"]*c_fc.weight[^"]*"' | head -n 2)
  m=$(echo "$t" | grep -m1 '^"m\.' | tr -d '"'); v=$(echo "$t" | grep -m1 '^"v\.' | tr -d '"')
  [[ -n $m ]] || m=$(st_header "$f" | grep -o '"m\.[^"]*"' | head -n 1 | tr -d '"')
  [[ -n $v ]] || v=$(st_header "$f" | grep -o '"v\.[^"]*"' | head -n 1 | tr -d '"')
  fresh opt-m-nan; st_float "$(newest)/optimizer.safetensors" "$m" 3 7fc00000; resume opt-m-nan refuse "$m"
  fresh opt-v-inf; st_float "$(newest)/optimizer.safetensors" "$v" 3 7f800000; resume opt-v-inf refuse "$v"
  fresh opt-v-negative; st_float "$(newest)/optimizer.safetensors" "$v" 3 bf800000; resume opt-v-negative refuse "$v"
  local -A edits=(
    [step]='s/"step":"\([0-9]*\)"/"step":"3\1"/'
    [step-text]='s/"step":"\([0-9]*\)"/"step":"ten"/'
    [adam_t-huge]='s/"adam_t":"\([0-9]*\)"/"adam_t":"99999999999999999999999"/'
    [batch]='s/"batch":"4"/"batch":"8"/'
    [seq_len]='s/"seq_len":"32"/"seq_len":"16"/'
    [world_size-0]='s/"world_size":"1"/"world_size":"0"/'
    [loader_batch-huge]='s/"loader_batch":"\([0-9]*\)"/"loader_batch":"18446744073709551615"/'
    [format]='s/"handgrad-optimizer"/"handgrad-optimiser"/'
    [config-d_model]='s/\\"d_model\\":64/\\"d_model\\":32/'
  )
  local -A named=([step]=step [step-text]=step [adam_t-huge]=adam_t [batch]=batch [seq_len]=ctx
                  [world_size-0]=world_size [loader_batch-huge]=loader [format]=format [config-d_model]=d_model)
  for c in "${!edits[@]}"; do
    fresh "opt-$c"; st_edit "$(newest)/optimizer.safetensors" "${edits[$c]}"
    resume "opt-$c" refuse "${named[$c]}"
  done
}

# A run that keeps AdamW's moments in bf16 (--optim-state bf16): its optimizer file holds
# BF16 tensors, whose values are checked as the F32 ones are.
malformed_optimizer_bf16() {
  local ref16=$WORK/ref_run_bf16 f m v
  [[ -d $ref16 ]] || "$HG" train "${TRAIN_ARGS[@]}" --ckpt-every 5 --optim-state bf16 --out "$ref16" >/dev/null 2>&1 ||
    { record $M opt16-reference "$BUILD" wrong "the --optim-state bf16 reference run failed"; return; }
  local REF=$ref16
  fresh opt16-probe; f=$PWD/$(newest)/optimizer.safetensors
  m=$(st_header "$f" | grep -o '"m\.[^"]*c_fc.weight"' | head -n 1 | tr -d '"')
  v=$(st_header "$f" | grep -o '"v\.[^"]*c_fc.weight"' | head -n 1 | tr -d '"')
  fresh opt16-m-nan; st_bf16 "$(newest)/optimizer.safetensors" "$m" 5 7fc0; resume opt16-m-nan refuse "$m"
  fresh opt16-v-negative; st_bf16 "$(newest)/optimizer.safetensors" "$v" 5 bf80; resume opt16-v-negative refuse "$v"
  fresh opt16-v-inf; st_bf16 "$(newest)/optimizer.safetensors" "$v" 9 7f80; resume opt16-v-inf refuse "$v"
}

malformed_run_folder() {
  local d
  fresh folder-no-model; rm "$(newest)/model.safetensors"; resume folder-no-model refuse model.safetensors
  fresh folder-name-step; d=$(newest); mv "$d" run/ckpt_00000050; resume folder-name-step refuse ckpt_00000050
  fresh folder-symlink; d=$(newest); ln -s "$PWD/$d" run/ckpt_00000099
  resume folder-symlink accept "" && [[ -e $(readlink run/ckpt_00000099) ]] ||
    record $M folder-symlink-target "$BUILD" wrong "the symlink's target is gone"
  fresh folder-tmp-leftover; cp -r "$(newest)" run/ckpt_00000011.tmp; resume folder-tmp-leftover accept ""
  [[ ! -e run/ckpt_00000011.tmp ]] || record $M folder-tmp-leftover-kept "$BUILD" wrong "the .tmp folder stayed"
  # run.json of the newest checkpoint
  local -A runjson=(
    [not-json]='s/^{/[/'
    [lr-string]='s/"lr":[^,}]*/"lr":"fast"/'
    [batch-5.5e40]='s/"batch":[^,}]*/"batch":5.5e40/'
    [batch-negative]='s/"batch":[^,}]*/"batch":-4/'
    [batch-fraction]='s/"batch":[^,}]*/"batch":2.5/'
    [max-steps-1e300]='s/"max-steps":[^,}]*/"max-steps":1e300/'
    [unknown-key]='s/^{/{"learning_rate":3,/'
    [trailing]='$s/$/ {}/'
  )
  local -A named=([lr-string]=lr [batch-5.5e40]=batch [batch-negative]=batch [batch-fraction]=batch
                  [max-steps-1e300]=max-steps [unknown-key]=learning_rate)
  local c
  for c in "${!runjson[@]}"; do
    fresh "runjson-$c"; sed -i -e "${runjson[$c]}" "$(newest)/run.json"
    resume "runjson-$c" refuse "${named[$c]:-run.json}"
  done
  fresh runjson-nul; printf '\0' >>"$(newest)/run.json"; resume runjson-nul refuse run.json
  fresh runjson-gone; rm "$(newest)/run.json"; resume runjson-gone refuse run.json
  # data.json: the shards the run read
  fresh datajson-not-json; echo '{"files": [' >"$(newest)/data.json"; resume datajson-not-json refuse data.json
  fresh datajson-size; sed -i 's/"bytes":\t[0-9]*/"bytes":\t12/' "$(newest)/data.json"; resume datajson-size refuse train_000000.bin
  fresh datajson-other-shards
  expect $M datajson-other-shards refuse train_000001.bin "$HG" train --resume --out run --threads 1 --max-steps 12 \
    --train "$DATA/shards/train_000000.bin"
  fresh datajson-allowed
  expect $M datajson-allowed warn "train_000001.bin" "$HG" train --resume --out run --threads 1 --max-steps 12 \
    --train "$DATA/shards/train_000000.bin" --allow-data-change
  # the tokenizer the checkpoint carries
  fresh tok-vocab-not-json; echo '{"a": ' >"$(newest)/vocab.json"
  expect $M tok-vocab-not-json refuse vocab.json "$HG" generate --model "$(newest)" --prompt hi --max-new-tokens 4
  fresh tok-merges-bad; printf '#version: 0.2\nonlyonetoken\n' >"$(newest)/merges.txt"
  expect $M tok-merges-bad refuse merges.txt "$HG" generate --model "$(newest)" --prompt hi --max-new-tokens 4
  fresh gen-no-weights; rm "$(newest)/model.safetensors"
  expect $M gen-no-weights refuse model.safetensors "$HG" generate --model "$(newest)" --prompt hi --max-new-tokens 4
  fresh export-nan; st_float "$(newest)/model.safetensors" transformer.wte.weight 5 7fc00000
  expect $M export-nan refuse transformer.wte.weight "$HG" export --model "$(newest)" --hf hfout
  [[ ! -e hfout ]] || record $M export-nan-left-folder "$BUILD" wrong "a refused export left hfout"
}

malformed_shards() {
  local s=$DATA/shards/train_000000.bin
  shard() { cp "$s" "$CASE/bad.bin"; }
  local -A at=( # name: "offset bytes-as-printf"
    [magic]='0 XGTOKENS' [version]='8 \x03\x00\x00\x00' [width-3]='12 \x03\x00\x00\x00'
    [count-more]='16 \xff\xff\x00\x00\x00\x00\x00\x00' [count-less]='16 \x01\x00\x00\x00\x00\x00\x00\x00'
    [vocab-70000]='24 \x70\x11\x01\x00' [separator-999]='28 \xe7\x03\x00\x00' [bound-999]='32 \xe7\x03\x00\x00'
    [token-299]='64 \x2b\x01' [token-65535]='100 \xff\xff' [token-middle]='2064 \xe8\x03'
  )
  local c off bytes
  for c in "${!at[@]}"; do
    fresh "shard-$c"; shard
    off=${at[$c]%% *}; bytes=${at[$c]#* }
    printf "$bytes" | put bad.bin "$off"
    if [[ $c == token-299 ]]; then # 299 < V = 300: a legal token, the shard is fine
      expect $M "shard-$c" accept "" "$HG" train "${TRAIN_ARGS[@]}" --train "$CASE/bad.bin" --out new --max-steps 2
    elif [[ $c == token-* ]]; then
      # the header's id bound is trusted at open: a token changed after `prepare` is
      # caught by the batch that reads it (--sequential reads them all, in order)
      expect $M "shard-$c" refuse bad.bin "$HG" train "${TRAIN_ARGS[@]}" --train "$CASE/bad.bin" --out new --sequential --max-steps 40
    else
      expect $M "shard-$c" refuse bad.bin "$HG" train "${TRAIN_ARGS[@]}" --train "$CASE/bad.bin" --out new --max-steps 2
      [[ ! -e new ]] || record $M "shard-$c-left-folder" "$BUILD" wrong "a refused run left its folder"
    fi
  done
  fresh shard-empty; : >bad.bin
  expect $M shard-empty refuse bad.bin "$HG" train "${TRAIN_ARGS[@]}" --train "$CASE/bad.bin" --out new
  fresh shard-odd; shard; printf x >>bad.bin
  expect $M shard-odd refuse bad.bin "$HG" train "${TRAIN_ARGS[@]}" --train "$CASE/bad.bin" --out new
  fresh shard-header-only; head -c 64 "$s" >bad.bin
  expect $M shard-header-only refuse bad.bin "$HG" train "${TRAIN_ARGS[@]}" --train "$CASE/bad.bin" --out new
  fresh shard-text; cp "$DATA/corpus.txt" bad.bin
  expect $M shard-text refuse bad.bin "$HG" train "${TRAIN_ARGS[@]}" --train "$CASE/bad.bin" --out new
  fresh shard-dir; mkdir bad.bin
  expect $M shard-dir refuse bad.bin "$HG" train "${TRAIN_ARGS[@]}" --train "$CASE/bad.bin" --out new
  fresh val-bad; shard; printf XX | put bad.bin 0
  expect $M val-bad refuse bad.bin "$HG" train "${TRAIN_ARGS[@]}" --val "$CASE/bad.bin" --out new
  fresh shard-too-short; head -c 80 "$s" >bad.bin; printf '\x08\x00\x00\x00\x00\x00\x00\x00' | put bad.bin 16
  expect $M shard-too-short refuse bad.bin "$HG" train "${TRAIN_ARGS[@]}" --train "$CASE/bad.bin" --out new
}

malformed_config() {
  local -A text=(
    [not-json]='{"lr": 1e-3,'
    [array]='[1, 2]'
    [empty]=''
    [lr-string]='{"lr": "fast"}'
    [lr-negative]='{"lr": -1}'
    [batch-5.5e40]='{"batch": 5.5e40}'
    [batch-zero]='{"batch": 0}'
    [batch-fraction]='{"batch": 1.5}'
    [seed-2e19]='{"seed": 2e19}'
    [unknown]='{"learning_rate": 1e-3}'
    [trailing]='{"lr": 1e-3} x'
    [model-unknown]='{"model": "huge"}'
    [arch-unknown]='{"arch": "norm=batchnorm"}'
    [threads-1e9]='{"threads": 1000000000}'
    [deep]="$(printf '%.0s[' $(seq 1 5000))"
    [bool-kind]='{"resume": "yes"}'
  )
  local -A named=([lr-string]=lr [lr-negative]=lr [batch-5.5e40]=batch [batch-zero]=batch [batch-fraction]=batch
                  [seed-2e19]=seed [unknown]=learning_rate [model-unknown]=huge [arch-unknown]=norm
                  [threads-1e9]=threads [bool-kind]=resume)
  local c
  for c in "${!text[@]}"; do
    fresh "config-$c"; printf '%s' "${text[$c]}" >c.json
    # the model named on the command line would override the file's
    [[ $c == model-unknown ]] && { expect $M "config-$c" refuse huge "$HG" train "${TRAIN_ARGS[@]:2}" --out new --config c.json; continue; }
    new_run "config-$c" refuse "${named[$c]:-c.json}" --config c.json
  done
  fresh config-nul; printf '{"lr": 1e-3}\0{"lr": 5}' >c.json; new_run config-nul refuse c.json --config c.json
  fresh config-missing; new_run config-missing refuse nothere.json --config nothere.json
  fresh config-dir; mkdir d.json; new_run config-dir refuse d.json --config d.json
}

malformed_flags() {
  fresh flags
  local -a cases=(
    "train-unknown|--frobnicate|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --frobnicate"
    "train-lr-text|--lr|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --lr fast"
    "train-lr-inf|--lr|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --lr inf"
    "train-lr-nan|--lr|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --lr nan"
    "train-batch-0|--batch|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --batch 0"
    "train-batch-huge|--batch|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --batch 99999999999999999999"
    "train-ctx-too-long|100001|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --ctx 100000"
    "train-no-value|--out|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out"
    "train-no-out|--out|train $(printf '%q ' "${TRAIN_ARGS[@]}")"
    "train-no-train|--train|train --model tiny --out new"
    "train-train-nomatch|nomatch|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --train nomatch_*.bin"
    "train-tok-missing|nothere|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --tokenizer nothere"
    "train-out-is-file|c.txt|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out c.txt"
    "train-out-too-long|--out|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out $(printf 'd%.0s' $(seq 1 4090))"
    "train-out-has-ckpt|--resume|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out run"
    "train-vocab-small|vocab_size|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --vocab-size 100"
    "train-heads|n_head|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --n-head 5"
    "train-arch-bad|--arch|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --arch mlp=relu9"
    "train-init-missing|nothere|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --init-from nothere"
    "train-total-batch|--total-batch-tokens|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --total-batch-tokens 100"
    "train-inject-bad|--inject-nan|train $(printf '%q ' "${TRAIN_ARGS[@]}") --out new --inject-nan x,y"
    "generate-no-model|--model|generate --prompt hi"
    "generate-temp-neg|--temperature|generate --model run --prompt hi --temperature -1"
    "generate-topp-2|--top-p|generate --model run --prompt hi --top-p 2"
    "generate-model-missing|nothere|generate --model nothere --prompt hi"
    "generate-too-many|--max-new-tokens|generate --model run --prompt hi --max-new-tokens -5"
    "export-no-hf|--hf|export --model run"
    "export-model-missing|nothere|export --model nothere --hf e"
    "prepare-missing|nothere.txt|prepare --tokenizer $DATA/tok --out p nothere.txt"
    "prepare-no-tok|--tokenizer|prepare --out p $DATA/corpus.txt"
    "prepare-val-2|--val-fraction|prepare --tokenizer $DATA/tok --out p --val-fraction 2 $DATA/corpus.txt"
    "tokenizer-vocab-1|--vocab-size|tokenizer train --vocab-size 1 --out t $DATA/corpus.txt"
    "tokenizer-encode-missing|nothere|tokenizer encode --tokenizer nothere hello"
    "tokenizer-no-command|tokenizer|tokenizer frob"
    "bench-ctx-0|--ctx|bench --ctx 0"
    "bench-model-unknown|huge|bench --model huge"
    "profile-threads-neg|--threads|profile --threads -1"
    "ops-plugin-missing|nothere.so|--ops ./nothere.so ops"
    "no-command|frob|frob"
  )
  local c name pattern args
  echo hello >c.txt
  for c in "${cases[@]}"; do
    name=${c%%|*}; c=${c#*|}; pattern=${c%%|*}; args=${c#*|}
    eval "set -- $args"
    expect $M "flag-$name" refuse "$pattern" "$HG" "$@"
  done
  expect $M flag-eval-without-val warn "--eval-every" "$HG" train "${TRAIN_ARGS[@]}" --out ev --max-steps 2 --eval-every 1
}

malformed_tokenizers() {
  fresh tokenizers
  mkdir -p t1 t2 t3 t4 t5
  cp "$DATA/tok/"* t1/; echo '{"a": 1' >t1/vocab.json
  cp "$DATA/tok/"* t2/; printf '#version: 0.2\nab\n' >t2/merges.txt
  echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "zz"]]}}' >t3/tokenizer.json
  printf 'IQ== 0\n!!!! 1\n' >t4/x.tiktoken
  echo '{"model": {"type": "Unigram"}}' >t5/tokenizer.json
  expect $M tok-vocab-json refuse vocab.json "$HG" tokenizer encode --tokenizer t1 hello
  expect $M tok-merges refuse merges.txt "$HG" tokenizer encode --tokenizer t2 hello
  expect $M tok-json-merge refuse tokenizer.json "$HG" tokenizer encode --tokenizer t3 hello
  expect $M tok-tiktoken refuse x.tiktoken "$HG" tokenizer encode --tokenizer t4/x.tiktoken hello
  expect $M tok-json-unigram refuse Unigram "$HG" tokenizer encode --tokenizer t5 hello
  expect $M tok-train-pretokenizer refuse tokenizer.json "$HG" train "${TRAIN_ARGS[@]}" --out new --tokenizer t3
}

malformed_hf() {
  local -A cfg=(
    [not-json]='s/^{/[/'
    [model-type]='s/"model_type": *"[a-z0-9]*"/"model_type": "bert"/'
    [n_layer-huge]='s/"n_layer": *[0-9]*/"n_layer": 5.5e40/'
    [n_embd-string]='s/"n_embd": *[0-9]*/"n_embd": "768"/'
  )
  local -A named=([model-type]=bert [n_layer-huge]=n_layer [n_embd-string]=n_embd)
  local c
  for c in "${!cfg[@]}"; do
    fresh "hf-config-$c"; cp -r "$HF" hf; sed -i -e "${cfg[$c]}" hf/config.json
    expect $M "hf-config-$c" refuse "${named[$c]:-config.json}" "$HG" generate --model hf --prompt hi --max-new-tokens 2
  done
  fresh hf-weights-trunc; cp -r "$HF" hf; truncate -s 100 hf/model.safetensors
  expect $M hf-weights-trunc refuse model.safetensors "$HG" generate --model hf --prompt hi --max-new-tokens 2
  fresh hf-weights-gone; cp -r "$HF" hf; rm hf/model.safetensors
  expect $M hf-weights-gone refuse model.safetensors "$HG" generate --model hf --prompt hi --max-new-tokens 2
  fresh hf-index-missing-shard; cp -r "$HF" hf; mv hf/model.safetensors hf/model-00001-of-00001.safetensors
  printf '{"metadata": {}, "weight_map": {"transformer.wte.weight": "model-00002-of-00002.safetensors"}}' \
    >hf/model.safetensors.index.json
  expect $M hf-index-missing-shard refuse model-00002-of-00002.safetensors "$HG" generate --model hf --prompt hi --max-new-tokens 2
  fresh hf-init-nan; cp -r "$HF" hf; st_float hf/model.safetensors transformer.h.0.attn.c_attn.weight 1 7fc00000
  expect $M hf-init-nan refuse transformer.h.0.attn.c_attn.weight "$HG" train "${TRAIN_ARGS[@]}" --out new --init-from-hf hf
  # sliding windows (Gemma 2's folder): a layer type handgrad lacks, a list of the wrong
  # length, a window that is no integer
  local -A win=(
    [layer-type]='s/"full_attention"/"chunked_attention"/'
    [layer-count]='0,/"sliding_attention",/s/"sliding_attention",/"sliding_attention", "full_attention",/'
    [window-string]='s/"sliding_window": *[0-9]*/"sliding_window": "96"/'
  )
  local -A wnamed=([layer-type]=layer_types [layer-count]=layer_types [window-string]=sliding_window)
  for c in "${!win[@]}"; do
    fresh "hf-window-$c"; cp -r "$root/tests/fixtures/hf_gemma2" hf; sed -i -e "${win[$c]}" hf/config.json
    expect $M "hf-window-$c" refuse "${wnamed[$c]}" "$HG" generate --model hf --prompt hi --max-new-tokens 2
  done
}

# A LoRA run on the Hugging Face folder (its adapters a PEFT folder in each checkpoint,
# base.json naming the base), damaged one file at a time, then resumed or exported.
malformed_lora() {
  local L=(--init-from-hf "$HF" --train "$WORK/lora_data/train_*.bin" --batch 2 --ctx 16 --threads 1 --peak-gflops 100)
  local good=$WORK/lora_ref c ck
  if [[ ! -d $good ]]; then
    "$HG" prepare --quiet --tokenizer "$HF" --out "$WORK/lora_data" "$DATA/corpus.txt" >/dev/null 2>&1 &&
      "$HG" train "${L[@]}" --lora r=2,alpha=4,dropout=0.1,targets=c_attn,c_fc --max-steps 2 --out "$good" \
        >/dev/null 2>&1 || { echo "campaign: the LoRA reference run failed" >&2; return; }
  fi
  lora_case() { fresh "lora-$1"; cp -r "$good" lrun; ck=$(ls -d lrun/ckpt_[0-9]* | tail -n 1); }
  lora_resume() { expect $M "lora-$1" refuse "$2" "$HG" train --resume --out lrun --max-steps 4; }
  # an edited config that is still valid: another rank than run.json's
  local -A cfg=(
    [r-other]='s/"r":\s*2/"r": 3/'
    [dora]='s/"use_dora":\s*false/"use_dora": true/'
    [rank-pattern]='s/"rank_pattern":\s*{\s*}/"rank_pattern": {"c_fc": 4}/'
    [r-zero]='s/"r":\s*2/"r": 0/'
    [unknown-key]='s/^{/{"lora_magic": 1,/'
    [not-json]='s/^{/[/'
  )
  local -A named=([dora]=use_dora [rank-pattern]=rank_pattern [r-zero]=r [unknown-key]=lora_magic [r-other]="not the run's")
  for c in "${!cfg[@]}"; do
    lora_case "config-$c"; sed -i -z -e "${cfg[$c]}" "$ck/adapter/adapter_config.json"
    lora_resume "config-$c" "${named[$c]:-adapter_config.json}"
  done
  lora_case adapter-trunc; truncate -s 100 "$ck/adapter/adapter_model.safetensors"
  lora_resume adapter-trunc adapter_model.safetensors
  lora_case adapter-nan; st_float "$ck/adapter/adapter_model.safetensors" \
    base_model.model.transformer.h.0.attn.c_attn.lora_A.weight 1 7fc00000
  lora_resume adapter-nan lora_A
  lora_case adapter-shape; st_edit "$ck/adapter/adapter_model.safetensors" 's/"shape":\[2,/"shape":[1,/'
  lora_resume adapter-shape adapter_model.safetensors
  lora_case base-hash; sed -i -e 's/"hash":\s*"[0-9a-f]*"/"hash": "0000000000000000"/' "$ck/base.json"
  lora_resume base-hash base.json
  lora_case base-json-bad; printf '{"path": 7}' >"$ck/base.json"
  lora_resume base-json-bad base.json
  lora_case export-trunc; truncate -s 100 "$ck/adapter/adapter_model.safetensors"
  expect $M lora-export-trunc refuse adapter_model.safetensors "$HG" export --model lrun --peft out
  L+=(--max-steps 2 --out new)
  fresh lora-flag-target; expect $M lora-flag-target refuse nope "$HG" train "${L[@]}" --lora r=2,targets=nope
  fresh lora-flag-rank; expect $M lora-flag-rank refuse "lora.r" "$HG" train "${L[@]}" --lora r=4096,targets=c_attn
  fresh lora-flag-freeze; expect $M lora-flag-freeze refuse "--freeze" "$HG" train "${L[@]}" --freeze 'nothing.*'
  fresh lora-flag-both; expect $M lora-flag-both refuse "--adapter" "$HG" train "${L[@]}" --lora r=2,targets=c_attn \
    --adapter "$good/ckpt_00000002/adapter"
}

# Chat data: bad JSONL records and templates to `prepare --chat` (each refused naming the
# file and line, and the field or the template's line, with no shard left), and damaged
# chat shards to `train` (the flags stream cut, unknown stream bits, a shard with flags
# beside one without).
malformed_chat() {
  local T=$WORK/chat_tok good='{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}'
  mkdir -p "$T" && cp "$HF/tokenizer.json" "$T/"
  chat_config() { # chat_config TEMPLATE: a tokenizer_config.json holding it
    printf '{"eos_token": "<|endoftext|>", "chat_template": "%s"}' "$1" >"$T/tokenizer_config.json"
  }
  local chatml="{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
  chat_prepare() { # chat_prepare CASE PATTERN LINE: the line between two good ones
    fresh "chat-$1"; printf '%s\n%s\n%s\n' "$good" "$3" "$good" >chat.jsonl
    expect $M "chat-$1" refuse "$2" "$HG" prepare --chat --quiet --tokenizer "$T" --out out chat.jsonl
    [[ ! -e out/train_000000.bin ]] || record $M "chat-$1-leftover" "$BUILD" wrong "a shard was left behind"
  }
  chat_config "$chatml"
  chat_prepare role 'chat.jsonl: line 2: messages[0].role' '{"messages": [{"role": "tool", "content": "x"}]}'
  chat_prepare not-object 'line 2: not a JSON object' '[1, 2]'
  chat_prepare truncated 'line 2: not valid JSON' '{"messages": [{"role": "user"'
  chat_prepare empty 'messages: empty' '{"messages": []}'
  chat_prepare content 'messages[0].content' '{"messages": [{"role": "user", "content": 7}]}'
  chat_prepare no-completion 'completion' '{"prompt": "p"}'
  chat_prepare neither 'neither "messages"' '{"text": "t"}'
  chat_config "{{ raise_exception('no system turns here') }}"
  chat_prepare raises 'no system turns here' "$good"
  chat_config "{{ messages | tojson }}"
  chat_prepare filter "filter 'tojson'" "$good"
  chat_config "{% for m in messages %}{{ m['content'] }}"
  chat_prepare unclosed 'chat_template: line' "$good"
  printf '{"eos_token": "<|endoftext|>"}' >"$T/tokenizer_config.json"
  chat_prepare no-template 'has no chat_template' "$good"
  # damaged chat shards
  chat_config "$chatml"
  local good_data=$WORK/chat_data
  if [[ ! -d $good_data ]]; then
    for i in $(seq 1 40); do echo "$good"; done >"$WORK/chat.jsonl"
    "$HG" prepare --chat --quiet --tokenizer "$T" --out "$good_data" --val-fraction 0 "$WORK/chat.jsonl" >/dev/null 2>&1 &&
      "$HG" prepare --quiet --tokenizer "$T" --out "$good_data/plain" --val-fraction 0 "$DATA/corpus.txt" >/dev/null 2>&1 ||
      { echo "campaign: the chat data failed to prepare" >&2; return; }
  fi
  local C=(--init-from-hf "$HF" --batch 2 --ctx 16 --threads 1 --peak-gflops 100 --max-steps 1 --out new)
  fresh chat-flags-cut; cp "$good_data/train_000000.bin" s.bin; truncate -s -3 s.bin
  expect $M chat-flags-cut refuse "s.bin: offset 16" "$HG" train "${C[@]}" --train s.bin
  fresh chat-streams; cp "$good_data/train_000000.bin" s.bin; printf '\x03' | put s.bin 36
  expect $M chat-streams refuse "s.bin: offset 36" "$HG" train "${C[@]}" --train s.bin
  fresh chat-mixed; cp "$good_data/train_000000.bin" a_1.bin; cp "$good_data/plain/train_000000.bin" a_0.bin
  expect $M chat-mixed refuse "has none" "$HG" train "${C[@]}" --train 'a_*.bin'
}

malformed_all() {
  malformed_model_file
  malformed_optimizer_file
  malformed_optimizer_bf16
  malformed_run_folder
  malformed_shards
  malformed_config
  malformed_flags
  malformed_tokenizers
  malformed_hf
  malformed_lora
  malformed_chat
  cd "$WORK" || exit 1
}
