/* The instruction-set check behind hg_cpu_lacks and hg_cpu_check (isa.c). */
#ifndef HG_CORE_ISA_H
#define HG_CORE_ISA_H

/* The extensions the library was compiled for, NULL-terminated (isa_list.c). */
extern const char *const hg_isa_library[];

/* The first name in `list` (NULL-terminated, __builtin_cpu_supports names such as
 * "avx512f") that `has` says is missing, or NULL. has NULL asks the running CPU; tests
 * pass their own. Compiled for baseline x86-64. */
const char *hg_isa_first_missing(const char *const *list, int (*has)(const char *isa));

#endif
