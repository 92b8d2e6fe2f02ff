#!/usr/bin/env bash
# Fetches GPT-2's BPE ranks (gpt2.tiktoken) into assets/ from the PyPI package
# openai-whisper, which ships them as whisper/assets/gpt2.tiktoken. Idempotent: does
# nothing when assets/gpt2.tiktoken is already there and whole. Usage: scripts/fetch_gpt2_vocab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dest=assets/gpt2.tiktoken
# The same file as tiktoken's r50k_base (gpt2) ranks; tiktoken pins this hash too.
sha=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
if [[ -f "$dest" ]] && echo "$sha  $dest" | sha256sum --check --status; then
  exit 0
fi
mkdir -p assets
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_gpt2_vocab: downloading openai-whisper from PyPI (no dependencies)"
python3 -m pip download --quiet --no-deps -d "$tmp" openai-whisper
python3 - "$tmp" "$dest.part" <<'PY'
import sys, pathlib, tarfile, zipfile
src, out = pathlib.Path(sys.argv[1]), sys.argv[2]
member = "whisper/assets/gpt2.tiktoken"
for f in src.iterdir():
    if f.suffix == ".whl":
        with zipfile.ZipFile(f) as z:
            data = z.read(member)
    elif f.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(f) as t:
            name = next(n for n in t.getnames() if n.endswith(member))
            data = t.extractfile(name).read()
    else:
        continue
    open(out, "wb").write(data)
    break
else:
    sys.exit("fetch_gpt2_vocab: no wheel or sdist of openai-whisper was downloaded")
PY
echo "$sha  $dest.part" | sha256sum --check --status ||
  { echo "fetch_gpt2_vocab: $dest.part does not have the expected sha256 $sha" >&2; exit 1; }
mv "$dest.part" "$dest"
echo "fetch_gpt2_vocab: wrote $dest ($(wc -l <"$dest") ranks)"
