#!/bin/bash
# The command's CPU guard, end to end: isa_guard_probe was compiled with -mISA for an
# instruction set ISA; on a CPU without it the guard must exit 1 before main with one
# line naming ISA (no SIGILL). Skipped (77) where the CPU has ISA.
# usage: cli_isa_guard.sh PROBE ISA
probe=${1:?usage: cli_isa_guard.sh PROBE ISA}
isa=${2:?usage: cli_isa_guard.sh PROBE ISA}
flag=${isa//./_}
if grep -qw "$flag" /proc/cpuinfo; then
    echo "SKIP: this CPU has $isa"
    exit 77
fi
out=$("$probe" 2>&1)
rc=$?
echo "$out"
[ "$rc" = 1 ] || { echo "FAIL: exit status $rc, want 1"; exit 1; }
[ "$(wc -l <<<"$out")" = 1 ] || { echo "FAIL: want one line"; exit 1; }
grep -q "compiled for $isa, which this CPU lacks" <<<"$out" || { echo "FAIL: the line does not name $isa"; exit 1; }
grep -q "main ran" <<<"$out" && { echo "FAIL: main ran"; exit 1; }
echo ok
