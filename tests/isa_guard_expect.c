/* Prints the instruction set the guard of isa_guard_probe must name on this CPU: the
 * first of the probe's list (cli/isa_list.c, compiled with the probe's flags) that the CPU
 * lacks, or nothing where it has them all. Compiled for baseline x86-64, so it runs
 * anywhere; tests/cli_isa_guard.sh checks its answer against /proc/cpuinfo. */
#include <stdio.h>

#include "core/isa.h"

extern const char *const cli_isa[];

int main(void) {
    const char *isa = hg_isa_first_missing(cli_isa, NULL);
    if (isa) puts(isa);
    return 0;
}
