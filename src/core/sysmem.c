/* How much memory this process may still use: the smaller of the kernel's MemAvailable
 * and what the cgroup limit leaves. */
#include <stdio.h>
#include <string.h>

#include "handgrad.h"

static size_t read_size(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = {0};
    size_t v = 0;
    if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3)) sscanf(buf, "%zu", &v);
    fclose(f);
    return v;
}

size_t hg_memory_available(void) {
    size_t avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %zu kB", &avail) == 1) {
                avail *= 1024;
                break;
            }
        fclose(f);
    }
    if (!avail) avail = (size_t)1 << 62; /* unknown: do not refuse */
    size_t limit = read_size("/sys/fs/cgroup/memory.max");
    size_t used = read_size("/sys/fs/cgroup/memory.current");
    if (limit && limit > used && limit - used < avail) avail = limit - used;
    return avail;
}
