#!/bin/bash
# Checks that an optimised build vectorised the CPU kernels at the width it was compiled
# for: objdump of libhandgrad.a must show 512-bit (zmm) arithmetic in an AVX-512 build,
# 256-bit (ymm) in an AVX2 one, in LayerNorm, GELU, attention, AdamW/sumsq and the
# classifier, and calls to glibc's vector math of that width (_ZGVeN16v_expf and
# _ZGVeN16v_tanhf; _ZGVdN8v_ for AVX2) in the GELU and classifier loops rather than only
# scalar expf/tanhf. Attention's exp is inline (vecmath.h's vexpf): no call at all in its
# loops. The two vector tile kernels carry their own target attributes, so every build
# has zmm in tile_avx512.c and ymm FMAs in tile_avx2.c. Scalar calls that remain (loop
# remainders, once-per-row corrections) are listed for information.
#
# The width comes from the instruction sets the library records it was compiled for
# (core/isa_list.c), not from this machine: object code is checked, not run.
#
# usage: check_vectorized.sh LIBHANDGRAD.a CONFIG NATIVE(0|1) INSTRUMENTED(0|1)
# Exits 77 (ctest's skip) for a build that is not optimised for AVX-512 or AVX2.
set -u

lib=${1:?usage: check_vectorized.sh LIBHANDGRAD.a CONFIG NATIVE INSTRUMENTED}
config=${2:-}
native=${3:-0}
instrumented=${4:-0}

skip() {
    echo "SKIP: $*"
    exit 77
}
[ "$native" = 1 ] || skip "built without HANDGRAD_NATIVE, so for baseline x86-64"
[ "$config" != Debug ] || skip "a Debug build is not optimised"
[ "$instrumented" = 0 ] || skip "sanitizer/fuzzer instrumentation keeps loops scalar"
command -v objdump >/dev/null || skip "objdump is not installed"
[ -f "$lib" ] || { echo "FAIL: $lib not found"; exit 1; }
isa=$(ar p "$lib" isa_list.c.o 2>/dev/null | strings | grep -x -m1 -E 'avx512f|avx2')
case "$isa" in
avx512f) R=zmm VEC=_ZGVe[NM]16v_ VNAME=_ZGVeN16v_ ;;
avx2) R=ymm VEC=_ZGVd[NM]8v_ VNAME=_ZGVdN8v_ ;;
*) skip "the library was compiled for neither AVX-512 nor AVX2" ;;
esac
echo "library compiled for $isa: checking $R arithmetic and ${VNAME}expf/tanhf calls"

# One line per function: member function $R-arithmetic vector-expf vector-tanhf
# scalar-expf scalar-tanhf ymm-FMAs zmm-FMAs. Calls show as relocations (archive members) or <sym@plt>.
summary=$(objdump -dr --no-show-raw-insn "$lib" | awk -v r="$R" -v vec="$VEC" '
    / file format / { m = $1; sub(/:$/, "", m); next }
    /^[0-9a-f]+ <.*>:$/ { fn = $2; gsub(/[<>:]/, "", fn); key = m " " fn; seen[key] = 1; next }
    key == "" { next }
    $0 ~ r && /v(add|sub|mul|div|fmadd|fnmadd|fmsub|fnmsub|max|min|sqrt|rsqrt|rcp|scalef)[0-9a-z]*p[sd]/ { z[key]++ }
    /ymm/ && /vfn?m(add|sub)[0-9]*ps/ { fy[key]++ }
    /zmm/ && /vfn?m(add|sub)[0-9]*ps/ { fz[key]++ }
    $0 ~ vec "expf" { ve[key]++; next }
    $0 ~ vec "tanhf" { vt[key]++; next }
    /(^|[^_A-Za-z0-9])expf(-0x|@plt|>)/ { se[key]++ }
    /(^|[^_A-Za-z0-9])tanhf(-0x|@plt|>)/ { st[key]++ }
    END { for (k in seen) print k, z[k] + 0, ve[k] + 0, vt[k] + 0, se[k] + 0, st[k] + 0, fy[k] + 0, fz[k] + 0 }')

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

Z=3 VE=4 VT=5 SE=6 ST=7 FY=8 FZ=9
need "layernorm forward" layernorm.c.o '^(norm_row|cpu_layernorm_forward|cpu_residual_layernorm_forward)' $Z "$R arithmetic"
need "layernorm backward" layernorm.c.o '^cpu_layernorm_backward' $Z "$R arithmetic"
need "gelu forward" gelu.c.o '^cpu_gelu_forward' $Z "$R arithmetic"
need "gelu backward" gelu.c.o '^cpu_gelu_backward' $Z "$R arithmetic"
need "attention forward" attention.c.o '^cpu_attention_forward' $Z "$R arithmetic"
need "attention backward" attention.c.o '^cpu_attention_backward' $Z "$R arithmetic"
need "adamw" adamw.c.o '^(cpu_adamw|adamw_tensor)' $Z "$R arithmetic"
need "sumsq" adamw.c.o '^cpu_sumsq' $Z "$R arithmetic"
need "classifier softmax" classifier.c.o '^(row_loss|cpu_classifier)' $Z "$R arithmetic"
need "tile kernel avx512" tile_avx512.c.o '.' $FZ "zmm FMAs"
need "tile kernel avx2" tile_avx2.c.o '.' $FY "ymm FMAs"

need "gelu forward tanhf" gelu.c.o '^cpu_gelu_forward' $VT "vector tanhf calls"
need "gelu backward tanhf" gelu.c.o '^cpu_gelu_backward' $VT "vector tanhf calls"
need "classifier expf" classifier.c.o '^(row_loss|cpu_classifier)' $VE "vector expf calls"
# attention's softmaxes run vexpf inline over the whole 64-key block: no call at all
none "attention forward vector expf" attention.c.o '^cpu_attention_forward' $VE "vector expf calls"
none "attention backward vector expf" attention.c.o '^cpu_attention_backward' $VE "vector expf calls"
none "attention backward scalar expf" attention.c.o '^cpu_attention_backward' $SE "scalar expf calls"

info "gelu scalar tanhf" gelu.c.o '.' $ST "scalar tanhf calls (loop remainders)"
info "attention forward scalar expf" attention.c.o '^cpu_attention_forward' $SE "scalar expf calls (per-row rescale)"
info "classifier scalar expf" classifier.c.o '.' $SE "scalar expf calls (loop remainders)"

if [ "$failures" -gt 0 ]; then
    echo "$failures vectorisation check(s) failed in $lib"
    exit 1
fi
echo "ok"
