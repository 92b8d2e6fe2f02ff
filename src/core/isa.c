/* The instruction sets this build was compiled for, checked against the running CPU
 * (hg_cpu_lacks, hg_cpu_check in handgrad.h). A build with -march=native (HANDGRAD_NATIVE)
 * copied to a machine with fewer instruction sets would otherwise die of SIGILL at the
 * first vector instruction. This file and core/error.c are compiled for baseline x86-64
 * (src/CMakeLists.txt), so the check and its message run on any x86-64 CPU; the list
 * they check comes from core/isa_list.c, compiled with the library's own flags. */
#include "core/error.h"
#include "core/isa.h"

/* __builtin_cpu_supports takes a string literal only, so the names map to calls here. */
static int cpu_has(const char *isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init(); /* the guard of cli/isa_guard.c runs before libgcc's constructor may have */
#define HAS(name)                                                                      \
    if (__builtin_strcmp(isa, name) == 0) return __builtin_cpu_supports(name);
    HAS("avx512f") HAS("avx512bw") HAS("avx512dq") HAS("avx512vl") HAS("avx512cd") HAS("avx512vnni")
    HAS("avx512bf16") HAS("avx512vbmi") HAS("avx512vbmi2") HAS("avx512ifma") HAS("avx512bitalg")
    HAS("avx512vpopcntdq") HAS("avx2") HAS("fma") HAS("avx") HAS("bmi") HAS("bmi2") HAS("sse4.2") HAS("popcnt")
    HAS("gfni") HAS("vpclmulqdq")
#if !defined(__clang__) /* clang 14 does not know these names; its builds take them as present */
    HAS("avx512fp16") HAS("f16c") HAS("vaes") HAS("movbe")
#endif
#undef HAS
#endif
    (void)isa;
    return 1;
}

const char *hg_isa_first_missing(const char *const *list, int (*has)(const char *isa)) {
    for (int i = 0; list[i]; i++)
        if (!(has ? has : cpu_has)(list[i])) return list[i];
    return NULL;
}

const char *hg_cpu_lacks(void) { return hg_isa_first_missing(hg_isa_library, NULL); }

hg_status hg_cpu_check(void) {
    const char *isa = hg_cpu_lacks();
    if (!isa) return HG_OK;
    return hg_fail(HG_ERR_UNSUPPORTED,
                   "cpu: this handgrad was compiled for %s, which this CPU lacks (built with -march=native on "
                   "another machine?); rebuild on this machine, or configure with -DHANDGRAD_NATIVE=OFF",
                   isa);
}
