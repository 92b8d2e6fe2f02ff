"""What the tokenizer benchmarks share: the texts of the tokenizer fixture
(tests/fixtures/gpt2_ids.bin), the "mixed" corpus made of them, and best-of timing."""
import pathlib
import struct
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
EOT = "<|endoftext|>"


def fixture_texts():
    """The valid-UTF-8 texts of tests/fixtures/gpt2_ids.bin."""
    data = (ROOT / "tests" / "fixtures" / "gpt2_ids.bin").read_bytes()
    n, off, texts = struct.unpack_from("<I", data, 8)[0], 12, []
    for _ in range(n):
        k = struct.unpack_from("<I", data, off)[0]; off += 4 + k
        k = struct.unpack_from("<I", data, off)[0]; text = data[off + 4:off + 4 + k]; off += 4 + k
        k = struct.unpack_from("<I", data, off)[0]; off += 4 + 4 * k
        try:
            texts.append(text.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return texts


def write_mixed(path, texts, newline=None):
    """texts joined, repeated to about 4 MB, copies separated by <|endoftext|>."""
    doc = "".join(texts)
    path.write_text(EOT.join([doc] * (4_000_000 // len(doc.encode()) + 1)), encoding="utf-8", newline=newline)


def best_of(fn, repeat):
    """The best of `repeat` timed calls of fn, after one untimed call."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
