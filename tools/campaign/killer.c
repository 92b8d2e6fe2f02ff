/* killer PID DIR SUFFIX DELAY_US: waits until an entry named ckpt_*SUFFIX appears in
 * DIR (".tmp": a checkpoint being written; ".del": one being pruned), waits DELAY_US
 * more, and sends SIGKILL to PID. It polls every 50 microseconds, so that a write of a
 * few milliseconds is caught part way. Exits 0 after a kill, 1 when PID ended first.
 * Part of the fault campaign (tools/campaign/campaign.sh). */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int seen(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t ls = strlen(suffix);
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        found = !strncmp(e->d_name, "ckpt_", 5) && n > ls && !strcmp(e->d_name + n - ls, suffix);
    }
    closedir(d);
    return found;
}

int main(int argc, char **argv) {
    if (argc != 5) return fprintf(stderr, "usage: killer PID DIR SUFFIX DELAY_US\n"), 2;
    pid_t pid = (pid_t)atol(argv[1]);
    while (!seen(argv[2], argv[3])) {
        if (kill(pid, 0) != 0) return 1;
        usleep(50);
    }
    usleep((useconds_t)atol(argv[4]));
    return kill(pid, SIGKILL) == 0 ? 0 : 1;
}
