/* Before main: a handgrad built with -march=native and run on a CPU without that ISA says
 * so in one line and exits 1, instead of dying of SIGILL somewhere in the first vector
 * loop. A constructor, compiled for baseline x86-64 (cli/CMakeLists.txt), so that it runs
 * before any code of the command built for the wider ISA. The list it checks is the
 * command's own (isa_list.c), compiled with the command's flags. */
#include <stdio.h>
#include <stdlib.h>

#include "core/isa.h"

extern const char *const cli_isa[]; /* isa_list.c */

__attribute__((constructor)) static void isa_guard(void) {
    const char *isa = hg_isa_first_missing(cli_isa, NULL);
    if (!isa) return;
    fprintf(stderr,
            "handgrad: this binary was compiled for %s, which this CPU lacks (built with -march=native on another "
            "machine?); rebuild it here, or configure with -DHANDGRAD_NATIVE=OFF\n",
            isa);
    exit(1);
}
