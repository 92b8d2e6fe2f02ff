/* Monotonic wall-clock time in seconds. */
#ifndef HG_CORE_TIMER_H
#define HG_CORE_TIMER_H

#include <time.h>

static inline double hg_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif
