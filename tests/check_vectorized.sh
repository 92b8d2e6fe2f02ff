#!/bin/bash
# Checks that an optimised AVX-512 build vectorised the CPU kernels: objdump of
# libhandgrad.a must show 512-bit (zmm) arithmetic in LayerNorm, GELU, attention, the
# tile kernel, AdamW/sumsq and the classifier, and calls to glibc's AVX-512 vector math
# (_ZGVeN16v_expf, _ZGVeN16v_tanhf) in the GELU, attention and classifier loops rather
# than only scalar expf/tanhf. Scalar calls that remain (loop remainders, once-per-row
# corrections) are listed for information.
#
# usage: check_vectorized.sh LIBHANDGRAD.a CONFIG NATIVE(0|1) INSTRUMENTED(0|1)
# Exits 77 (ctest's skip) when the build is not an optimised one for this AVX-512 machine.
set -u

lib=${1:?usage: check_vectorized.sh LIBHANDGRAD.a CONFIG NATIVE INSTRUMENTED}
config=${2:-}
native=${3:-0}
instrumented=${4:-0}

skip() {
    echo "SKIP: $*"
    exit 77
}
grep -qw avx512f /proc/cpuinfo 2>/dev/null || skip "this machine has no AVX-512F"
[ "$native" = 1 ] || skip "built without HANDGRAD_NATIVE, so not for this machine's ISA"
[ "$config" != Debug ] || skip "a Debug build is not optimised"
[ "$instrumented" = 0 ] || skip "sanitizer/fuzzer instrumentation keeps loops scalar"
command -v objdump >/dev/null || skip "objdump is not installed"
[ -f "$lib" ] || { echo "FAIL: $lib not found"; exit 1; }

# One line per function: member function zmm-arithmetic vector-expf vector-tanhf
# scalar-expf scalar-tanhf. Calls show as relocations (archive members) or <sym@plt>.
summary=$(objdump -dr --no-show-raw-insn "$lib" | awk '
    / file format / { m = $1; sub(/:$/, "", m); next }
    /^[0-9a-f]+ <.*>:$/ { fn = $2; gsub(/[<>:]/, "", fn); key = m " " fn; seen[key] = 1; next }
    key == "" { next }
    /zmm/ && /v(add|sub|mul|div|fmadd|fnmadd|fmsub|fnmsub|max|min|sqrt|rsqrt|rcp|scalef)[0-9a-z]*p[sd]/ { z[key]++ }
    /_ZGVe[NM]16v_expf/ { ve[key]++; next }
    /_ZGVe[NM]16v_tanhf/ { vt[key]++; next }
    /(^|[^_A-Za-z0-9])expf(-0x|@plt|>)/ { se[key]++ }
    /(^|[^_A-Za-z0-9])tanhf(-0x|@plt|>)/ { st[key]++ }
    END { for (k in seen) print k, z[k] + 0, ve[k] + 0, vt[k] + 0, se[k] + 0, st[k] + 0 }')

failures=0
# sum MEMBER FUNCTION-REGEX FIELD: the field summed over the member's matching functions.
sum() {
    awk -v m="$1" -v re="$2" -v f="$3" '$1 == m && $2 ~ re { s += $f } END { print s + 0 }' <<<"$summary"
}
# need WHAT MEMBER FUNCTION-REGEX FIELD FIELD-NAME
need() {
    local n
    n=$(sum "$2" "$3" "$4")
    if [ "$n" -gt 0 ]; then
        printf 'ok    %-34s %4d %s\n' "$1" "$n" "$5"
    else
        printf 'FAIL  %-34s no %s in %s functions matching /%s/\n' "$1" "$5" "$2" "$3"
        failures=$((failures + 1))
    fi
}
# none WHAT MEMBER FUNCTION-REGEX FIELD FIELD-NAME: the loop has no scalar remainder.
none() {
    local n
    n=$(sum "$2" "$3" "$4")
    if [ "$n" -eq 0 ]; then
        printf 'ok    %-34s no %s\n' "$1" "$5"
    else
        printf 'FAIL  %-34s %d %s in %s /%s/\n' "$1" "$n" "$5" "$2" "$3"
        failures=$((failures + 1))
    fi
}
info() {
    printf 'info  %-34s %4d %s\n' "$1" "$(sum "$2" "$3" "$4")" "$5"
}

Z=3 VE=4 VT=5 SE=6 ST=7
need "layernorm forward" layernorm.c.o '^(norm_row|cpu_layernorm_forward|cpu_residual_layernorm_forward)' $Z "zmm arithmetic"
need "layernorm backward" layernorm.c.o '^cpu_layernorm_backward' $Z "zmm arithmetic"
need "gelu forward" gelu.c.o '^cpu_gelu_forward' $Z "zmm arithmetic"
need "gelu backward" gelu.c.o '^cpu_gelu_backward' $Z "zmm arithmetic"
need "attention forward" attention.c.o '^cpu_attention_forward' $Z "zmm arithmetic"
need "attention backward" attention.c.o '^cpu_attention_backward' $Z "zmm arithmetic"
need "tile kernel" tile_avx512.c.o '.' $Z "zmm arithmetic"
need "adamw" adamw.c.o '^(cpu_adamw|adamw_tensor)' $Z "zmm arithmetic"
need "sumsq" adamw.c.o '^cpu_sumsq' $Z "zmm arithmetic"
need "classifier softmax" classifier.c.o '^(row_loss|cpu_classifier)' $Z "zmm arithmetic"

need "gelu forward tanhf" gelu.c.o '^cpu_gelu_forward' $VT "calls to _ZGVeN16v_tanhf"
need "gelu backward tanhf" gelu.c.o '^cpu_gelu_backward' $VT "calls to _ZGVeN16v_tanhf"
need "attention forward expf" attention.c.o '^cpu_attention_forward' $VE "calls to _ZGVeN16v_expf"
need "attention backward expf" attention.c.o '^cpu_attention_backward' $VE "calls to _ZGVeN16v_expf"
need "classifier expf" classifier.c.o '^(row_loss|cpu_classifier)' $VE "calls to _ZGVeN16v_expf"
# the backward's softmax runs the whole 64-key block: no scalar remainder at all
none "attention backward scalar expf" attention.c.o '^cpu_attention_backward' $SE "scalar expf calls"

info "gelu scalar tanhf" gelu.c.o '.' $ST "scalar tanhf calls (loop remainders)"
info "attention forward scalar expf" attention.c.o '^cpu_attention_forward' $SE "scalar expf calls (per-row rescale)"
info "classifier scalar expf" classifier.c.o '.' $SE "scalar expf calls (loop remainders)"

if [ "$failures" -gt 0 ]; then
    echo "$failures vectorisation check(s) failed in $lib"
    exit 1
fi
echo "ok"
