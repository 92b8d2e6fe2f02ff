#!/usr/bin/env python3
"""Tokenizer speed on tokenizer.json files: handgrad against the tokenizers package,
one thread each, side by side on the same text.

The tokenizers are the fixtures of tools/gen_tokjson_fixture.py (tests/fixtures/tokenizers/:
Llama 3, Qwen2, GPT-2 and Mistral/Llama 2 styles, a few hundred ids each), and three of
full size built here from GPT-2's 50257 ids (assets/gpt2.tiktoken, fetched by
scripts/fetch_gpt2_vocab.sh, turned into vocab + merges): GPT-2's own pipeline
(gpt2-50k), Llama 3's (its split regex, ByteLevel, ignore_merges: llama3-50k) and
Qwen2's (its split regex, NFC: qwen2-50k).
Both encode the same documents (a corpus split at <|endoftext|> markers), special
tokens' text as text. The ids are compared first, on the whole corpus, so the speeds
are for identical output. Each figure is the best of --repeat runs after a warm-up.

    python3 bench/tokenizer_vs_hf.py [--repeat 5] [--handgrad build/handgrad] [--only llama3,qwen2]

tokenizers: Tokenizer.from_file(path), the faster of encode_batch(docs) and
encode_batch_fast(docs) (no offsets), add_special_tokens=False, RAYON_NUM_THREADS=1 and
TOKENIZERS_PARALLELISM=false. handgrad: `handgrad tokenizer bench --threads 1`.

Corpora: the King James Bible (scripts/kjv_corpus.sh, English prose, ASCII) and "mixed",
the valid-UTF-8 texts of tests/fixtures/gpt2_ids.bin (code, numbers, emoji, CJK,
combining marks, whitespace runs, random Unicode) and the texts of
tests/fixtures/tokenizers/reference.json, repeated to about 4 MB.
"""
import argparse
import base64
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from tokenizer_corpus import EOT, ROOT, best_of, fixture_texts, write_mixed  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "tokenizers"


def mixed_corpus(path):
    texts = fixture_texts() + json.loads((FIXTURES / "reference.json").read_text(encoding="utf-8"))["texts"]
    write_mixed(path, [t for t in texts if EOT not in t], newline="")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def full_size(out_dir):
    """tokenizer.json files with GPT-2's vocabulary: its merges are, for each token of
    two or more bytes, the pair its bytes reduce to under the lower ranks."""
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
    sys.path.insert(0, str(ROOT / "tools"))
    from gen_tokjson_fixture import LLAMA3_PAT, QWEN2_PAT
    subprocess.check_call([str(ROOT / "scripts" / "fetch_gpt2_vocab.sh")])
    B = bytes_to_unicode()
    ranks = {}
    for line in open(ROOT / "assets" / "gpt2.tiktoken", "rb"):
        if line.strip():
            t, r = line.split()
            ranks[base64.b64decode(t)] = int(r)

    def bpe(tok, max_rank):
        parts = [bytes([b]) for b in tok]
        while True:
            best = min(((ranks.get(parts[i] + parts[i + 1], max_rank), i) for i in range(len(parts) - 1)),
                       default=(max_rank, 0))
            if best[0] >= max_rank:
                return parts
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]

    def text(b):
        return "".join(B[x] for x in b)

    merges = []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) > 1:
            left, right = bpe(tok, r)
            merges.append((text(left), text(right)))
    vocab = {text(t): r for t, r in ranks.items()}
    split = {"llama3-50k": LLAMA3_PAT, "qwen2-50k": QWEN2_PAT}
    for name in ("gpt2-50k", "llama3-50k", "qwen2-50k"):
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=name == "llama3-50k"))
        if name == "gpt2-50k":
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        else:
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(split[name]), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        if name == "qwen2-50k":
            tok.normalizer = normalizers.NFC()
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
        (out_dir / name).mkdir(exist_ok=True)
        tok.save(str(out_dir / name / "tokenizer.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--handgrad", default=None)
    ap.add_argument("--only", default="llama3,qwen2,gpt2,sp,gpt2-50k,llama3-50k,qwen2-50k")
    a = ap.parse_args()
    hg = a.handgrad or next((str(ROOT / p) for p in ("build/handgrad", "build/cli/handgrad") if (ROOT / p).exists()),
                            None)
    if not hg:
        sys.exit("build handgrad first (scripts/build.sh)")
    subprocess.check_call([str(ROOT / "scripts" / "kjv_corpus.sh")])
    tmp = pathlib.Path(tempfile.mkdtemp())
    mixed = tmp / "mixed.txt"
    mixed_corpus(mixed)
    full_size(tmp)
    print(f"tokenizers {tokenizers.__version__}, 1 thread, best of {a.repeat}")
    print("| corpus | MB | tokenizer | tokens | handgrad MB/s | tokenizers MB/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for corpus, path in (("KJV", ROOT / "data" / "kjv" / "kjv.txt"), ("mixed", mixed)):
        text = path.read_bytes().decode("utf-8")  # no newline translation: \r\n stays
        docs = text.split(EOT)
        mb = len(text.encode()) / 1e6
        for name in a.only.split(","):
            tj = str((tmp if name.endswith("-50k") else FIXTURES) / name / "tokenizer.json")
            tok = Tokenizer.from_file(tj)
            tok.encode_special_tokens = True  # special tokens' text is text, as handgrad's default
            ours = subprocess.check_output([hg, "tokenizer", "encode", "--binary", "--tokenizer", tj, str(path)])
            ours = [i for (i,) in struct.iter_unpack("<i", ours)]
            if ours != tok.encode(text, add_special_tokens=False).ids:
                sys.exit(f"{corpus}, {name}: handgrad's ids differ from the tokenizers package's")
            ref = tok.encode_batch(docs, add_special_tokens=False)
            n_tokens = sum(len(e.ids) for e in ref)
            t_batch = best_of(lambda: tok.encode_batch(docs, add_special_tokens=False), a.repeat)
            t_fast = best_of(lambda: tok.encode_batch_fast(docs, add_special_tokens=False), a.repeat)
            h = json.loads(subprocess.check_output([hg, "tokenizer", "bench", "--tokenizer", tj, "--threads", "1",
                                                    "--repeat", str(a.repeat), str(path)]))
            assert h["tokens"] == n_tokens, (h["tokens"], n_tokens)
            ref_mbs = mb / min(t_batch, t_fast)
            print(f"| {corpus} | {mb:.1f} | {name} | {n_tokens} | {h['mb_per_s']:.1f} | {ref_mbs:.1f} | "
                  f"{h['mb_per_s'] / ref_mbs:.2f}x |", flush=True)
    subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
