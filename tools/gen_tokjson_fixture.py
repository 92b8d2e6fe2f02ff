#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizers/: tiny tokenizer.json files in the styles of Llama 3,
Qwen2, GPT-2 and Mistral/Llama 2 (sentencepiece BPE with byte fallback, twice: with a
Prepend/Replace normalizer and with a Metaspace pre-tokenizer; and without byte
fallback, so that rare characters are unk_token, with and without fuse_unk), one with
added tokens' lstrip/rstrip/single_word rules, Gemma 1 and 2, Phi-3 and OLMo 2 (each
with the pipeline of the family's real tokenizer.json: see the functions), trained with
the tokenizers package on a small varied text, and reference.json: the ids the
tokenizers package gives for a set of test texts, and their decoded text.

The C test (tests/data/test_tokjson.c) loads each tokenizer.json with handgrad and
compares, so the test path needs no Python. Regenerate after changing the texts:

    python3 tools/gen_tokjson_fixture.py

Per tokenizer and text, reference.json holds
  plain:   encode(text, add_special_tokens=False) with encode_special_tokens=True, so
           special tokens' text is ordinary text (handgrad's default);
  special: the same with special tokens matched (handgrad's HG_ENCODE_ALLOW_SPECIAL);
  bos:     encode(text) with the post-processor, when it adds a BOS;
  decoded: decode(special, skip_special_tokens=False).
Training runs on one thread (RAYON_NUM_THREADS=1), so reruns write the same files.
"""
import argparse
import json
import os
import pathlib
import re

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")

TRAIN = """In the beginning the world was without form, and void; and darkness was upon the face of the deep.
It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.
The quick brown fox jumps over the lazy dog. She said: "We'll see; they're sure it's fine, aren't they?"
I've been there. You'd think we'd learn. THEY'LL NEVER KNOW. Don't stop; won't stop.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 2026 65536 3.14159 2.71828 1,000,000 $19.99 50% 12:30.
def train(model, data, steps=100):
    for step in range(steps):
        loss = model(data[step % len(data)])
        loss.backward()
    return model
int main(void) { for (int i = 0; i < 10; i++) printf("%d\\n", i); return 0; }
Le café est très bon, la crème brûlée aussi. À bientôt, garçon! Ça va? Où est l'hôtel?
Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Mädchen, schön, grün.
El niño comió mañana una piña. ¿Qué tal? ¡Olé!
Москва — столица России. Привет, мир!
東京は日本の首都です。こんにちは、世界。中文文本，汉字和标点。北京欢迎你。
서울은 한국의 수도입니다. 안녕하세요.
Emoji: 😀 😂 👍 🎉 ❤️ 🚀 👩‍💻 👨‍👩‍👧 🇫🇷 🇯🇵 ✨
Tabs\tand  spaces   and\nnew lines\r\nand more.
The end of the text, the end of the story, and the end of the world as we know it.
"""

# Test texts: none of them is the training text.
TEXTS = [
    "Hello world! This is a test of the tokenizer, with plain ASCII prose.",
    "It's what WE'LL do, and THEY'RE sure: I'M here, YOU'VE seen, HE'D known, it'S odd.",
    "café naïve résumé crème brûlée",                                   # precomposed
    "cafe\u0301 nai\u0308ve re\u0301sume\u0301 cre\u0300me",            # decomposed (NFC changes them)
    "Å Å ﬁ ℌ ㈱ \u1e9b\u0323 \u0041\u030a\u0328 \u0344 \u1100\u1161\u11a8",  # NFC corner cases
    "東京タワーと北京の天安门。漢字、ひらがな、カタカナ。한국어 텍스트입니다.",
    "emoji 😀😀 👍🏽 👩‍👩‍👦‍👦 🏳️‍🌈 🇫🇷🇩🇪🇯🇵 ❤️‍🔥 1️⃣",
    "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890 12345678901 123456789012",
    "3.14159 -2.5e-10 1,000,000 $19.99 0x1F 2026-11-24 ٣٤٥ ४५६ Ⅻ ½ ²",
    "tabs\tand\t\ttabs  two  spaces   three    four\n\nnewlines\r\nwindows\r\n\r\n",
    "nbsp\u00a0here and\u00a0\u00a0two, ideographic\u3000space\u3000\u3000end, thin\u2009space",
    "   leading spaces and trailing spaces   ",
    "\n\n\nnew lines first\n",
    "def f(x):\n    if x > 0:\n        return x ** 2  # square\n    return -x\n",
    "int main(void) {\n\tfor (int i = 0; i < n; i++) {\n\t\ta[i] += b[i];\n\t}\n}\n",
    "<|endoftext|>text after<|endoftext|> and <|im_start|>user\nhi<|im_end|> <|begin_of_text|>x<|eot_id|>",
    "<s>Hello</s> and <unk> as text",
    "<tool_call>{\"name\": \"f\"}</tool_call> and <tool_call without end",
    "a",
    " ",
    "the the the the the",
    "Zürich Ελληνικά Русский עברית العربية हिन्दी ไทย",
    "WORD word Word wORD, 'quoted' \"double\" `back` «guillemets» ‘curly’ “curly”",
    "x" * 300 + " " + "9" * 40 + " " + "é" * 50,
    # added tokens' rules (the rules fixture): lstrip, rstrip, single_word
    "I saw a <mask> 😺 and  <mask>x, a<mask>  b\t\n<mask>",
    "<|im_start|>user\nhi<|im_end|>  \n\n<|im_start|>assistant\u3000<|im_end|>\u00a0end<|im_end|>",
    "cat concat cats cat_ _cat (cat) 猫cat cat猫 cafe\u0301cat cat3 3cat cat's cat",
    " <sep> a <sep>b\t<sep>\n<sep><sep>  <sep>",
    "don't dont don  don. ndon \u1e9eig \u1e9eiger x\u1e9eig",
    # chat markup of the families below (Phi-3, Gemma, OLMo 2), and raw "▁"
    "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|> It is 4.</s>  Next<|end|>\n\n<|system|>   x<|endoftext|>",
    "<start_of_turn>user\nhi there<end_of_turn>\n<start_of_turn>model\n  Sure:\n\n\n<table>\t\tx</table><unused0>"
    "<mask> [@BOS@]<eos>",
    "|||PHONE_NUMBER||| <|extra_id_0|>x <|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>  return 1<|pad|>"
    "<|endofprompt|>",
    "raw marks: x\u2581\u2581y \u2581\u2581\u2581 z\u2581  \u2581 end",
]

SPECIAL_TEXT = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|end_of_text|>",
                "<|eot_id|>", "<s>", "</s>", "<unk>", "<tool_call>", "</tool_call>"]


def byte_level_alphabet():
    return pre_tokenizers.ByteLevel.alphabet()


def train_byte_level(pre, vocab_size, normalizer=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=byte_level_alphabet(),
                                  show_progress=False, min_frequency=2)
    tok.train_from_iterator([TRAIN], trainer=trainer)
    return tok


def merges_as_strings(js):
    """The older form of model.merges ("a b"), as Llama 3's and Qwen2's files have it."""
    d = json.loads(js)
    d["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in d["model"]["merges"]]
    return json.dumps(d, ensure_ascii=False, indent=2)


def with_whole_words(tok, words):
    """The same tokenizer with whole-word tokens that no merge makes, as Llama 3's
    vocabulary has: only ignore_merges reaches them."""
    d = json.loads(tok.to_str())
    vocab = d["model"]["vocab"]
    for w in words:
        assert w not in vocab
        vocab[w] = len(vocab)
    merges = [tuple(m) for m in d["model"]["merges"]]
    out = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    out.normalizer, out.pre_tokenizer, out.decoder = tok.normalizer, tok.pre_tokenizer, tok.decoder
    return out


def llama3():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                            use_regex=False)])
    tok = with_whole_words(train_byte_level(pre, 420, ignore_merges=True), ["Ġtokenizer", "Ġtest", "Hello"])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>")])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return merges_as_strings(tok.to_str())


def qwen2():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                            use_regex=False)])
    tok = train_byte_level(pre, 400, normalizer=normalizers.NFC())
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in ("<tool_call>", "</tool_call>")])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return merges_as_strings(tok.to_str())


def rules():
    """Qwen2's style with added tokens that have matching rules: lstrip, rstrip and
    single_word, special or not, in the raw text and (normalized=True) in the NFC text."""
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                            use_regex=False)])
    tok = train_byte_level(pre, 400, normalizer=normalizers.NFC())
    tok.add_special_tokens([AddedToken("<|im_start|>", special=True, normalized=False),
                            AddedToken("<|im_end|>", special=True, rstrip=True, normalized=False),
                            AddedToken("<mask>", special=True, lstrip=True, normalized=False)])
    tok.add_tokens([AddedToken("<sep>", special=False, lstrip=True, rstrip=True, normalized=False),
                    AddedToken("cat", special=False, single_word=True, normalized=False),
                    AddedToken("don", special=False, single_word=True, lstrip=True, normalized=False),
                    AddedToken("\u1e9eig", special=False, single_word=True, normalized=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return merges_as_strings(tok.to_str())


def gpt2():
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok = train_byte_level(pre, 380)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    d = json.loads(tok.to_str())
    assert isinstance(d["model"]["merges"][0], list)  # merges as pairs
    return json.dumps(d, ensure_ascii=False, indent=2)


def sp_learn(normalizer, specials, vocab_size=520):
    """A sentencepiece-style BPE learned on the training text: its model as JSON."""
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, min_frequency=2,
                                  special_tokens=list(specials))
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizer
    base.train_from_iterator([TRAIN], trainer=trainer)
    return json.loads(base.to_str())["model"]


def sp_vocab(learned, head, byte_fallback, tab=False):
    """The sentencepiece layout: the head tokens (specials, user-defined pieces), 256 byte
    tokens (with tab, "\\t" itself in place of <0x09>, as Gemma's file has it), then the
    learned tokens. Characters seen fewer than 3 times in the training text are left out,
    so they fall back to their bytes (or unk_token)."""
    rare = {c for c in set(TRAIN) if TRAIN.count(c) < 3 and c != " "}
    vocab = {t: i for i, t in enumerate(head)}
    for b in range(256 if byte_fallback else 0):
        vocab["\t" if tab and b == 9 else f"<0x{b:02X}>"] = len(vocab)
    for t, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]):
        if t not in vocab and not rare & set(t):
            vocab[t] = len(vocab)
    merges = [tuple(m) for m in learned["merges"] if not rare & set("".join(m))]
    return vocab, merges


def llama2_normalizer():
    return normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])


def sp_decoder(strip=True):
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    return decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if strip else []))


def drop_key(js, *path):
    """The file without a key that the tokenizers version of the real file did not write
    (e.g. model.ignore_merges, new in 0.19)."""
    d = json.loads(js)
    o = d
    for k in path[:-1]:
        o = o[k]
    del o[path[-1]]
    return json.dumps(d, ensure_ascii=False, indent=2)


def sentencepiece(metaspace, byte_fallback=True, fuse_unk=True):
    """Llama 2 / Mistral v0.1: <unk> <s> </s>, 256 byte tokens, then the learned tokens;
    characters seen fewer than 3 times in the training text are left out, so they fall
    back to their bytes. Without byte_fallback there are no byte tokens, and such
    characters become <unk> (a run of them one <unk> with fuse_unk)."""
    learned = sp_learn(llama2_normalizer(), ["<unk>", "<s>", "</s>"])
    vocab, merges = sp_vocab(learned, ["<unk>", "<s>", "</s>"], byte_fallback)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=fuse_unk,
                                    byte_fallback=byte_fallback))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    else:
        tok.normalizer = llama2_normalizer()
    tok.decoder = sp_decoder()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ("<unk>", "<s>", "</s>")])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return merges_as_strings(tok.to_str())


def phi3():
    """microsoft/Phi-3-mini-4k-instruct: Llama 2's pipeline (Prepend/Replace normalizer, no
    pre-tokenizer, byte fallback, fuse_unk, the decoder with Strip), no ignore_merges key;
    "</s>" an added token that is not special and takes the whitespace after it (rstrip);
    special chat tokens after the vocabulary, all but <|endoftext|> with rstrip; and a
    post-processor that adds no BOS (single [$A], no special tokens)."""
    learned = sp_learn(llama2_normalizer(), ["<unk>", "<s>", "</s>"])
    vocab, merges = sp_vocab(learned, ["<unk>", "<s>", "</s>"], True)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = llama2_normalizer()
    tok.decoder = sp_decoder()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ("<unk>", "<s>")])
    tok.add_tokens([AddedToken("</s>", special=False, rstrip=True, normalized=False)])
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tok.add_special_tokens([AddedToken(s, special=True, rstrip=True, normalized=False)
                            for s in ("<|assistant|>", "<|placeholder1|>", "<|system|>", "<|end|>", "<|placeholder5|>",
                                      "<|user|>")])
    tok.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B:1", special_tokens=[])
    return drop_key(merges_as_strings(tok.to_str()), "model", "ignore_merges")


GEMMA_USER = ["<mask>", "[@BOS@]", "<unused0>", "<unused1>", "<start_of_turn>", "<end_of_turn>", "\n", "\n\n",
              "\n\n\n", "▁▁", "▁▁▁", "\t\t", "<table>", "</table>", "<h1>", "</h1>"]
GEMMA_SPECIAL = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>")


def gemma(version):
    """google/gemma-2b (version 1) and gemma-2-2b (2): a Replace " " -> "▁" normalizer alone
    (no Prepend: no dummy prefix), byte fallback with "\\t" itself in place of <0x09>,
    fuse_unk, <pad> <eos> <bos> <unk> first and the sentencepiece user-defined pieces
    (<mask>, <unusedN>, chat markers, newline and "▁" runs, HTML tags) in model.vocab, a
    TemplateProcessing that adds <bos>, and the decoder Replace/ByteFallback/Fuse without
    Strip. Version 1 (tokenizers 0.15): no pre-tokenizer, no ignore_merges key, only the
    six control tokens added. Version 2 as transformers' GemmaConverter writes it: the
    no-op pre-tokenizer Split(" ", MergedWithPrevious) (the normalizer left no space), and
    every user-defined piece an added token, not special (normalized false), the chat
    markers special."""
    learned = sp_learn(normalizers.Replace(" ", "▁"), ["<pad>", "<eos>", "<bos>", "<unk>"], vocab_size=560)
    head = ["<pad>", "<eos>", "<bos>", "<unk>"] + GEMMA_USER
    vocab, merges = sp_vocab(learned, head, True, tab=True)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    if version == 2:
        tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    tok.decoder = sp_decoder(strip=False)
    for t in head:
        if t in GEMMA_SPECIAL:
            tok.add_special_tokens([AddedToken(t, special=True, normalized=False)])
        elif version == 2:
            tok.add_tokens([AddedToken(t, special=False, normalized=False)])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 2)])
    js = merges_as_strings(tok.to_str())
    return drop_key(js, "model", "ignore_merges") if version == 1 else js


def olmo2():
    """allenai/OLMo-2-1124-7B (the dolma2 tokenizer, cl100k_base converted): Llama 3's
    split regex written as Split(behavior Removed, invert true), then ByteLevel without
    use_regex; no normalizer and no post-processor; the ByteLevel decoder with its
    defaults; continuing_subword_prefix and end_of_word_suffix "" and no ignore_merges
    key; added tokens after the vocabulary, special (<|endoftext|>, FIM, chat, pad) and
    not (<|extra_id_N|>, Dolma 1's |||PHONE_NUMBER||| markers)."""
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="removed", invert=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                            use_regex=False)])
    tok = train_byte_level(pre, 400)
    for t, special in [("<|extra_id_0|>", False), ("<|endoftext|>", True), ("<|fim_prefix|>", True),
                       ("<|fim_middle|>", True), ("<|fim_suffix|>", True), ("|||PHONE_NUMBER|||", False),
                       ("|||EMAIL_ADDRESS|||", False), ("<|im_start|>", True), ("<|im_end|>", True),
                       ("<|extra_id_1|>", False), ("<|endofprompt|>", True), ("<|pad|>", True)]:
        token = AddedToken(t, special=special, normalized=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    d = json.loads(merges_as_strings(tok.to_str()))
    d["model"]["continuing_subword_prefix"] = ""
    d["model"]["end_of_word_suffix"] = ""
    del d["model"]["ignore_merges"]
    assert d["post_processor"] is None and d["normalizer"] is None
    return json.dumps(d, ensure_ascii=False, indent=2)


FIXTURES = {"llama3": llama3, "qwen2": qwen2, "gpt2": gpt2, "sp": lambda: sentencepiece(False),
            "sp_metaspace": lambda: sentencepiece(True), "rules": rules,
            "sp_unk": lambda: sentencepiece(False, byte_fallback=False),
            "sp_unk_unfused": lambda: sentencepiece(True, byte_fallback=False, fuse_unk=False),
            "gemma": lambda: gemma(1), "gemma2": lambda: gemma(2), "phi3": phi3, "olmo2": olmo2}


def reference(name, path):
    tok = Tokenizer.from_file(str(path))
    d = json.loads(path.read_text(encoding="utf-8"))
    post = d.get("post_processor") or {}
    # a TemplateProcessing that puts a token before the text (Phi-3's puts none)
    adds_bos = "TemplateProcessing" in json.dumps(post) and len(tok.encode("").ids) > 0
    cases = []
    for text in TEXTS:
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        special = tok.encode(text, add_special_tokens=False).ids
        case = {"plain": plain, "special": special,
                "decoded": tok.decode(special, skip_special_tokens=False)}
        if adds_bos:
            case["bos"] = tok.encode(text).ids
        cases.append(case)
    specials = {s: tok.token_to_id(s) for s in SPECIAL_TEXT if tok.token_to_id(s) is not None}
    added = d["added_tokens"]
    bos = tok.encode("").ids[0] if adds_bos and tok.encode("").ids else -1
    return {"file": f"{name}/tokenizer.json", "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "bos": bos, "specials": specials, "n_added": len(added), "cases": cases}


def fuzz_seed(js, n_merges=24):
    """A fixture cut down to its single characters, its first merges and its added
    tokens, renumbered: a small seed for fuzz/fuzz_tokenizer_json.c."""
    d = json.loads(js)
    model = d["model"]
    split = (lambda m: m.split(" ")) if isinstance(model["merges"][0], str) else (lambda m: m)
    merges = model["merges"][:n_merges]
    keep = {k for k in model["vocab"] if len(k) == 1 or k.startswith("<")}
    keep |= {"".join(split(m)) for m in merges} | {p for m in merges for p in split(m)}
    old = {t["id"]: t["content"] for t in d["added_tokens"]}
    keep |= set(old.values())
    names = [k for k, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]) if k in keep]
    names += [c for i, c in sorted(old.items()) if c not in model["vocab"]]
    new = {k: i for i, k in enumerate(names)}
    model["vocab"] = {k: new[k] for k in names if k in model["vocab"]}
    model["merges"] = merges
    for t in d["added_tokens"]:
        t["id"] = new[t["content"]]
    text = json.dumps(d, ensure_ascii=False)
    for i, c in old.items():  # the post-processor's ids
        text = text.replace(f'"ids": [{i}]', f'"ids": [{new[c]}]')
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=str(ROOT / "tests" / "fixtures" / "tokenizers"))
    ap.add_argument("--fuzz-dir", default=str(ROOT / "fuzz" / "corpus" / "tokenizer_json"))
    args = ap.parse_args()
    out = pathlib.Path(args.out_dir)
    ref = {"tokenizers_version": tokenizers.__version__, "texts": TEXTS, "tokenizers": {}}
    for name, make in FIXTURES.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        path = out / name / "tokenizer.json"
        path.write_text(make(), encoding="utf-8")
        ref["tokenizers"][name] = reference(name, path)
        seed = fuzz_seed(path.read_text(encoding="utf-8"))
        Tokenizer.from_str(seed)  # still a valid tokenizer
        pathlib.Path(args.fuzz_dir).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(args.fuzz_dir) / f"{name}.json").write_text(seed, encoding="utf-8")
        r = ref["tokenizers"][name]
        print(f"{name}: {r['vocab_size']} ids, {r['n_added']} added tokens, bos {r['bos']} -> {path}")
    text = json.dumps(ref, ensure_ascii=False, indent=1)
    # one line per list of ids, not one line per id
    text = re.sub(r"\[\n\s*(-?\d+(?:,\n\s*-?\d+)*)\n\s*\]",
                  lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text)
    (out / "reference.json").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
