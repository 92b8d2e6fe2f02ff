/* The instruction sets the command was compiled for (core/isa_names.inc): data only, for
 * the guard in isa_guard.c. */
#include <stddef.h>

#include "core/isa.h"

const char *const cli_isa[] = {
#include "core/isa_names.inc"
    NULL,
};
