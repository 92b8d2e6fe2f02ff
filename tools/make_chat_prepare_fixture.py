#!/usr/bin/env python3
"""Writes tests/fixtures/chat_prepare.json: the token ids and loss mask transformers gives
for chat records, which tests/data/test_prepare_chat.c compares with `hg_prepare_chat`
(src/data/prepare_chat.c) token for token, so Python stays out of the test.

The tokenizer is tests/fixtures/hf_llama/tokenizer.json (a small BPE tokenizer whose added
special tokens are Llama 3's <|begin_of_text|>, <|end_of_text|> and <|eot_id|>); the
templates are the committed real ones (tests/fixtures/chat_templates/*.jinja), each with
its family's bos_token and eos_token. For a "messages" record:
  ids    tokenizer.apply_chat_template(messages, tokenize=True), which encodes the
         rendered text with special tokens recognised;
  train  1 for the tokens that lie wholly inside an assistant message's span: what
         rendering messages[:i+1] adds to rendering messages[:i] with
         add_generation_prompt=True, as far as it agrees with the whole conversation's
         text (Phi-3.5 ends a conversation with <|endoftext|>, which a middle message
         does not have), located in the whole text with the tokenizer's
         own offsets (return_offsets_mapping), not by the prefix encodings the C code
         uses, so the two are independent.
For a "prompt"/"completion" record (TRL's non-conversational prompt-completion form):
  tokenizer(prompt) (its post-processor's BOS included), then
  tokenizer(completion, add_special_tokens=False) and the eos token's id; the loss on
  the completion and the EOS.
The first token of a record is never a target (train 0).

Usage: python3 tools/make_chat_prepare_fixture.py [--out tests/fixtures/chat_prepare.json]
"""
import argparse
import json
import os

import transformers
from transformers import PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")

# family: bos, eos, whether the template takes a system message
FAMILIES = {
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>", True),
    "qwen2.5": (None, "<|im_end|>", True),
    "gemma2": ("<bos>", "<eos>", False),
    "phi3.5": ("<s>", "<|endoftext|>", True),
    "olmo2": ("<|endoftext|>", "<|endoftext|>", True),
    "smollm2": ("<|im_start|>", "<|im_end|>", True),
}

SYSTEM = {"role": "system", "content": "You answer in one short sentence."}
CONVERSATIONS = [
    [{"role": "user", "content": "Who wrote Genesis?"},
     {"role": "assistant", "content": "Tradition names Moses."}],
    [{"role": "user", "content": "In the beginning?"},
     {"role": "assistant", "content": "God created the heaven and the earth."},
     {"role": "user", "content": "And then? Say it with  two spaces and é."},
     {"role": "assistant", "content": " Light,  then a firmament.\nThen dry land."}],
]
PROMPTS = [{"prompt": "The Lord is my shepherd;", "completion": " I shall not want."}]


def ids_of(out):
    """apply_chat_template's ids, whether it returns a list or a BatchEncoding."""
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def record_messages(tok, msgs):
    full = tok.apply_chat_template(msgs, tokenize=False)
    ids = ids_of(tok.apply_chat_template(msgs, tokenize=True))
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    assert list(enc["input_ids"]) == ids, "apply_chat_template's ids are not the rendered text's"
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        before = tok.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True) if i else ""
        through = tok.apply_chat_template(msgs[:i + 1], tokenize=False)
        assert full.startswith(before) and through.startswith(before)
        end = os.path.commonprefix([through, full])  # Phi-3.5 ends a conversation with <|endoftext|>
        spans.append((len(before), len(end)))
    train = [int(any(a <= s and e <= b for a, b in spans)) for s, e in enc["offset_mapping"]]
    train[0] = 0
    return {"messages": msgs}, ids, train


def record_prompt(tok, rec, eos_id):
    p = list(tok(rec["prompt"])["input_ids"])
    c = list(tok(rec["completion"], add_special_tokens=False)["input_ids"]) + [eos_id]
    return rec, p + c, [0] * len(p) + [1] * len(c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(FIX, "chat_prepare.json"))
    args = ap.parse_args()
    cases = []
    for fam, (bos, eos, system) in FAMILIES.items():
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(FIX, "hf_llama", "tokenizer.json"))
        tok.chat_template = open(os.path.join(FIX, "chat_templates", fam + ".jinja"), encoding="utf-8").read()
        if bos:
            tok.bos_token = bos
        if eos:
            tok.eos_token = eos
        records = []
        for conv in CONVERSATIONS:
            msgs = ([SYSTEM] if system else []) + conv
            rec, ids, train = record_messages(tok, msgs)
            records.append({"record": rec, "ids": ids, "train": train})
        eos_id = tok.convert_tokens_to_ids(eos)
        if eos_id is not None and eos_id != tok.unk_token_id and eos in tok.get_added_vocab():
            for p in PROMPTS:
                rec, ids, train = record_prompt(tok, p, eos_id)
                records.append({"record": rec, "ids": ids, "train": train})
        cases.append({"family": fam, "bos_token": bos, "eos_token": eos, "records": records})
    out = {"made_by": "tools/make_chat_prepare_fixture.py", "transformers": transformers.__version__,
           "tokenizer": "hf_llama/tokenizer.json", "cases": cases}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {sum(len(c['records']) for c in cases)} records in {len(cases)} families")


if __name__ == "__main__":
    main()
