#!/usr/bin/env python3
"""Tokenizer speed, handgrad against tiktoken, side by side on the same text.

Both encode the same documents (a corpus file split at <|endoftext|> markers) with
the GPT-2 ranks from assets/gpt2.tiktoken, single-threaded and then on N threads
(tiktoken's encode_ordinary_batch, handgrad's OpenMP loop over documents, as prepare
runs). Each figure is the best of --repeat runs after a warm-up. The ids are compared
first, so the speeds are for identical output. Then `handgrad prepare` end to end.

    python3 bench/tokenizer_vs_tiktoken.py [--threads 2] [--repeat 5] [--handgrad build/cli/handgrad]

Corpora: the King James Bible (scripts/kjv_corpus.sh, English prose) and "mixed", the
valid-UTF-8 texts of tests/fixtures/gpt2_ids.bin (code, numbers, emoji, CJK, combining
marks, whitespace runs, random Unicode) repeated to about 4 MB.
"""
import argparse
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import time

GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

try:
    import tiktoken
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "tiktoken"])
    import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tokenizer_corpus import EOT, ROOT, best_of, fixture_texts, write_mixed  # noqa: E402


def mixed_corpus(path):
    write_mixed(path, fixture_texts())


def handgrad_bench(hg, vocab, path, threads, repeat):
    out = subprocess.check_output([hg, "tokenizer", "bench", "--tokenizer", vocab, "--threads", str(threads),
                                   "--repeat", str(repeat), str(path)])
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--handgrad", default=None)
    a = ap.parse_args()
    hg = a.handgrad or next((str(ROOT / p) for p in ("build/handgrad", "build/cli/handgrad") if (ROOT / p).exists()),
                            None)
    if not hg:
        sys.exit("build handgrad first (scripts/build.sh)")
    subprocess.check_call([str(ROOT / "scripts" / "fetch_gpt2_vocab.sh")])
    subprocess.check_call([str(ROOT / "scripts" / "kjv_corpus.sh")])
    vocab = str(ROOT / "assets" / "gpt2.tiktoken")
    enc = tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=load_tiktoken_bpe(vocab),
                            special_tokens={EOT: 50256})
    tmp = pathlib.Path(tempfile.mkdtemp())
    mixed = tmp / "mixed.txt"
    mixed_corpus(mixed)
    print(f"tiktoken {tiktoken.__version__}, {a.threads} threads, best of {a.repeat}")
    print("| corpus | MB | handgrad 1T MB/s | tiktoken 1T MB/s | ratio | "
          f"handgrad {a.threads}T MB/s | tiktoken {a.threads}T MB/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for name, path in (("KJV", ROOT / "data" / "kjv" / "kjv.txt"), ("mixed", mixed)):
        text = path.read_bytes().decode("utf-8")  # no newline translation: \r\n stays
        docs = text.split(EOT)
        mb = len(text.encode()) / 1e6
        # Same ids first.
        ours = subprocess.check_output([hg, "tokenizer", "encode", "--binary", "--tokenizer", vocab, str(path)])
        ref = [i for d in enc.encode_ordinary_batch(docs, num_threads=a.threads) for i in d]
        ours_no_eot = [i for (i,) in struct.iter_unpack("<i", ours)]
        want = enc.encode_ordinary(text)
        if ours_no_eot != want:
            sys.exit(f"{name}: handgrad's ids differ from tiktoken's")
        t1 = best_of(lambda: [enc.encode_ordinary(d) for d in docs], a.repeat)
        tn = best_of(lambda: enc.encode_ordinary_batch(docs, num_threads=a.threads), a.repeat)
        h1 = handgrad_bench(hg, vocab, path, 1, a.repeat)
        hn = handgrad_bench(hg, vocab, path, a.threads, a.repeat)
        assert h1["tokens"] == len(ref), (h1["tokens"], len(ref))
        print(f"| {name} | {mb:.1f} | {h1['mb_per_s']:.1f} | {mb / t1:.1f} | {h1['mb_per_s'] / (mb / t1):.2f}x | "
              f"{hn['mb_per_s']:.1f} | {mb / tn:.1f} | {hn['mb_per_s'] / (mb / tn):.2f}x |")
    print()
    for threads in sorted({1, a.threads}):
        t = time.perf_counter()
        log = subprocess.run([hg, "prepare", "--quiet", "--tokenizer", vocab, "--out", str(tmp / "shards"),
                              "--threads", str(threads), str(ROOT / "data" / "kjv" / "kjv.txt")],
                             check=True, capture_output=True, text=True).stderr.strip()
        dt = time.perf_counter() - t
        mb = (ROOT / "data" / "kjv" / "kjv.txt").stat().st_size / 1e6
        print(f"prepare KJV, {threads} thread(s): {dt:.3f} s wall incl. start-up and vocabulary load, "
              f"{mb / dt:.1f} MB/s  [{log}]")
    subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
