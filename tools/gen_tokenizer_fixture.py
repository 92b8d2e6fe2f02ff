#!/usr/bin/env python3
"""Writes tests/fixtures/gpt2_ids.bin: test texts and the GPT-2 ids tiktoken gives them.

The C test (tests/data/test_tokenizer_gpt2.c) encodes the same texts with handgrad and
compares, so the test path needs no Python. Regenerate after changing the texts:

    scripts/fetch_gpt2_vocab.sh && python3 tools/gen_tokenizer_fixture.py

Reference. For valid UTF-8, the ids are tiktoken's encode_ordinary() with the GPT-2
ranks from assets/gpt2.tiktoken, loaded offline. tiktoken takes str, so it cannot see
invalid UTF-8; for such texts the reference is tiktoken's own BPE (_encode_single_piece)
over the pieces of GPT-2's pattern, where each invalid byte counts as one character that
is neither letter, number nor space (Python's errors="surrogateescape" view). The script
checks that this split-then-BPE route equals encode_ordinary on every valid text first.

File format (little-endian): "HGTF", u32 version 1, u32 n_cases, then per case
u32 name_len, name, u32 text_len, text bytes, u32 n_ids, n_ids x u32.
"""
import pathlib
import random
import struct
import sys

import regex
import tiktoken
from tiktoken.load import load_tiktoken_bpe

ROOT = pathlib.Path(__file__).resolve().parent.parent
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# The same pattern with \s spelled as the Unicode property the Rust regex means by it.
WS_PAT = GPT2_PAT.replace(r"\s", r"\p{White_Space}").replace(r"\S", r"\P{White_Space}")


def gpt2_encoding(path):
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=load_tiktoken_bpe(str(path)),
                             special_tokens={"<|endoftext|>": 50256})


PROSE = """It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of
foolishness, it was the epoch of belief, it was the epoch of incredulity. We had everything before us;
we had nothing before us. "Don't panic," she said -- and then, quietly: 'I'm sure they'll come.'
The quick brown fox jumps over the lazy dog. Mr. O'Neill's café served crème brûlée at 7:30 p.m.
"""

CODE = '''#include <stdio.h>
int main(int argc, char **argv) {
\tfor (int i = 0; i < argc; i++) {
\t\tprintf("%d: %s\\n", i, argv[i]);   // print each argument
\t}
    return argc > 1 ? 0 : -1;
}
def tokenize(text: str) -> list[int]:
    """Split `text` and return ids."""
    return [ord(c) ** 2 for c in text if c != ' ']  # squares!
x+=1;y-=2;z*=3;w/=4;a<<=b>>=c&&d||e!=f==g
'''

NUMBERS = ("0 1 12 123 1234 12345 1234567890123 3.14159 -2.5e-10 1,000,000 $19.99 50% 0x1F 0b1010 "
           "2024-05-20 12:34:56 ٣٤٥ ४५६ Ⅻ ½ ¾ ² ① 10km 3rd 1st\n")

WHITESPACE = ("a  b   c    d\t\te\n\nf\n\n\ng \n h\t \n  i\r\nj\r\n\r\nk   \n"
              "   leading and trailing   \n\n\n\n    \t\t  end\u00a0nbsp\u3000ideo\u2003em\u2009thin"
              "\u180emvs\u0085nel\u2028ls\u2029ps\x0bvt\x0cff\x1cfs\x1dgs\x1ers\x1fus\u200bzw\ufeffbom  ")

CONTRACTIONS = ("I'm you're he's she'd we've they'll it's don't can't won't isn't 'S 'LL 'Re 's 'd 'm "
                "''s ' s rock'n'roll o'clock y'all' '''\n")

EMOJI = "😀 😃😄 👍🏽 👨‍👩‍👧‍👦 🇺🇸🇫🇷 ❤️ 🏳️‍🌈 🤖✨ smile😀end 😀😀😀 \U0001F9D1\u200d\U0001F4BB\n"

CJK = "日本語のテキストです。中文文本，包括标点符号！한국어 텍스트입니다. 漢字かなカナ混じり文、ｈａｌｆ　ｗｉｄｔｈ\n"

COMBINING = ("e\u0301 a\u0308 n\u0303 Z\u0324\u0308\u0301a\u0337l\u0334g\u0338o\u0336 "
             "नमस्ते दुनिया ภาษาไทย שָׁלוֹם مَرْحَبًا Ελληνικά ё й ǅ ﬁ\n")

SPECIAL_LITERAL = "Hello <|endoftext|> world<|endoftext|>\n<|endoftext|> x <|endof"

INVALID = (b"abc\xff\xfedef \xc3\x28 \xe2\x82 hello \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end\x80"
           b"  \xff\xff  x\xe2\x82\xacy \xf0\x9f\x98 \xf0\x9f\x98\x80 it\xff's 12\xff34 \xc2\n\xa0")


def random_unicode(rng, n):
    pools = ["abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \t\n\r ",
             "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "éèàüöçñßøåæœ", "日本語中文한국어", "😀👍🏽❤️🇺🇸",
             "\u0301\u0308\u0303", "\u00a0\u3000\u2003\u2028\u0085", "٣४Ⅻ½", "αβγδεζηθ", "абвгд", "'s'll"]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def cases():
    rng = random.Random(20261122)
    yield "prose", PROSE.encode()
    yield "code", CODE.encode()
    yield "numbers", NUMBERS.encode()
    yield "whitespace", WHITESPACE.encode()
    yield "contractions", CONTRACTIONS.encode()
    yield "emoji", EMOJI.encode()
    yield "cjk", CJK.encode()
    yield "combining", COMBINING.encode()
    yield "special_literal", SPECIAL_LITERAL.encode()
    yield "invalid_utf8", INVALID
    yield "long_letters", ("a" * 3000 + " " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(4000))).encode()
    yield "long_digits", "".join(rng.choice("0123456789") for _ in range(2500)).encode()
    yield "long_punct", ("!" * 1000 + "-=" * 500 + ".").encode()
    yield "long_spaces", (" " * 2000 + "x" + "\n" * 700 + "\t" * 300 + " y").encode()
    yield "long_mixed_word", ("Supercalifragilistic" * 60 + "ÉtéNaïve" * 40).encode()
    for k in range(4):
        yield f"random_unicode_{k}", random_unicode(rng, 2500).encode()
    yield "random_ascii", "".join(rng.choice("abcde fgh\n\t.,;'0123456789ABC  ") for _ in range(5000)).encode()
    for k in range(3):
        yield f"random_bytes_{k}", bytes(rng.randrange(256) for _ in range(1500))
    mixed = bytearray()
    for _ in range(300):
        mixed += rng.choice([b"hello ", b"\xff", b"\xc3\xa9", b"\xe2\x82", b"  ", b"'s", b"123", b"\n", b"\xf0\x9f\x98\x80"])
    yield "mixed_invalid", bytes(mixed)


def reference_ids(enc, data):
    """tiktoken's BPE over GPT-2's pieces, invalid bytes counted as 'other' characters."""
    text = data.decode("utf-8", errors="surrogateescape")
    # Lone surrogates are category Cs, so the \p{L}/\p{N}/space classes treat them as
    # 'other'; byte offsets follow from re-encoding each piece.
    ids = []
    for m in regex.finditer(WS_PAT, text):
        ids += enc._encode_single_piece(m.group(0).encode("utf-8", errors="surrogateescape"))
    return ids


def main():
    vocab = ROOT / "assets" / "gpt2.tiktoken"
    if not vocab.exists():
        sys.exit("gen_tokenizer_fixture: run scripts/fetch_gpt2_vocab.sh first")
    enc = gpt2_encoding(vocab)
    out = bytearray(b"HGTF" + struct.pack("<II", 1, 0))
    n = 0
    for name, data in cases():
        ref = reference_ids(enc, data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            ids = enc.encode_ordinary(text)
            if ids != ref:
                sys.exit(f"gen_tokenizer_fixture: {name}: split-then-BPE differs from encode_ordinary")
        else:
            ids = ref
        assert enc.decode_bytes(ids) == data, name
        nb = name.encode()
        out += struct.pack("<I", len(nb)) + nb + struct.pack("<I", len(data)) + data
        out += struct.pack("<I", len(ids)) + struct.pack(f"<{len(ids)}I", *ids)
        n += 1
        print(f"{name:18s} {len(data):6d} bytes {len(ids):6d} ids{'' if text is not None else '  (invalid UTF-8)'}")
    struct.pack_into("<I", out, 8, n)
    path = ROOT / "tests" / "fixtures" / "gpt2_ids.bin"
    path.write_bytes(out)
    print(f"wrote {path.relative_to(ROOT)}: {n} cases, {len(out)} bytes (tiktoken {tiktoken.__version__})")


if __name__ == "__main__":
    main()
