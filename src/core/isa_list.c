/* The instruction sets the library was compiled for (isa_names.inc); data only. */
#include <stddef.h>

#include "core/isa.h"

const char *const hg_isa_library[] = {
#include "core/isa_names.inc"
    NULL,
};
