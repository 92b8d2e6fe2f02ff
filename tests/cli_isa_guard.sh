#!/bin/bash
# The command's CPU guard, end to end: isa_guard_probe was compiled with -mISA for an
# instruction set ISA (which implies others: -mavx512fp16 implies avx512f, bw, dq, vl);
# on a CPU without one of them the guard must exit 1 before main with one line naming the
# first missing one (no SIGILL). EXPECT (isa_guard_expect, baseline code) prints that
# name, or nothing where the CPU has them all (skipped, 77); its answer must agree with
# /proc/cpuinfo, where Linux may spell a flag with an underscore (avx512_fp16,
# avx512_bf16) or without (avx512f, avx512bw).
# usage: cli_isa_guard.sh PROBE EXPECT ISA
probe=${1:?usage: cli_isa_guard.sh PROBE EXPECT ISA}
expect_bin=${2:?usage: cli_isa_guard.sh PROBE EXPECT ISA}
isa=${3:?usage: cli_isa_guard.sh PROBE EXPECT ISA}
expect=$("$expect_bin") || { echo "FAIL: $expect_bin failed"; exit 1; }
# has FLAG: /proc/cpuinfo lists FLAG, spelled with or without an underscore after avx512
has() {
  local f=${1//./_}
  grep -qwE "${f}|${f/avx512/avx512_}" /proc/cpuinfo
}
if [ -z "$expect" ]; then
  has "$isa" || { echo "FAIL: the guard finds every ISA of the probe, but /proc/cpuinfo lacks $isa"; exit 1; }
  echo "SKIP: this CPU has $isa and everything it implies"
  exit 77
fi
has "$expect" && { echo "FAIL: the guard would name $expect, which /proc/cpuinfo lists"; exit 1; }
out=$("$probe" 2>&1)
rc=$?
echo "$out"
[ "$rc" = 1 ] || { echo "FAIL: exit status $rc, want 1"; exit 1; }
[ "$(wc -l <<<"$out")" = 1 ] || { echo "FAIL: want one line"; exit 1; }
grep -q "compiled for $expect, which this CPU lacks" <<<"$out" || { echo "FAIL: the line does not name $expect"; exit 1; }
grep -q "main ran" <<<"$out" && { echo "FAIL: main ran"; exit 1; }
echo ok
