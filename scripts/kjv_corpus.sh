#!/usr/bin/env bash
# Writes the King James Bible (Debian's bible-kjv, public domain, about 4.3 MB) as the
# demo corpus: one verse a line with the references ("Ge1:1 ") stripped, a blank line
# between chapters, and an <|endoftext|> line between books, so that each of the 66
# books is one document for `handgrad prepare`. Idempotent.
# Usage: scripts/kjv_corpus.sh [out.txt]   (default data/kjv/kjv.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/kjv/kjv.txt}
[[ -s "$out" ]] && exit 0
command -v bible >/dev/null || { echo "kjv_corpus: 'bible' is missing; run scripts/deps.sh (package bible-kjv)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
# A reference is <book><chapter>:<verse>; books may start with a digit (1Sm, 2Ki).
bible -f "Gen1:1-Rev22:21" | awk '
  match($0, /^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ /) {
    ref = substr($0, 1, RLENGTH - 1); text = substr($0, RLENGTH + 1)
    book = ref; sub(/[0-9]+:[0-9]+$/, "", book)
    chap = ref; sub(/:[0-9]+$/, "", chap)
    if (NR > 1 && book != last_book) print "<|endoftext|>"
    else if (NR > 1 && chap != last_chap) print ""
    print text; last_book = book; last_chap = chap; next
  }
  { print "kjv_corpus: unexpected line " NR ": " $0 > "/dev/stderr"; exit 1 }' >"$out.part"
mv "$out.part" "$out"
echo "kjv_corpus: wrote $out ($(wc -c <"$out") bytes)"
