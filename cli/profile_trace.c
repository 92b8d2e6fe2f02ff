/* The Chrome trace event format for handgrad profile --trace: one complete ("X") event
 * per op and per region (step, forward, classifier, backward, optimizer), timestamps in
 * microseconds, one track per calling thread. Perfetto and chrome://tracing read it. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profile.h"

static void add_event(cJSON *list, const prof_run *r, const hg_prof_event *e, int pid) {
    /* whole nanoseconds, so a child's end never rounds past its parent's */
    long long t0 = llround(e->start * 1e9), t1 = llround(e->end * 1e9);
    cJSON *o = cJSON_CreateObject(), *args;
    cJSON_AddStringToObject(o, "name", e->name);
    cJSON_AddStringToObject(o, "cat", e->region ? "region" : profile_pass_name(e->pass));
    cJSON_AddStringToObject(o, "ph", "X");
    cJSON_AddNumberToObject(o, "ts", (double)t0 / 1e3);
    cJSON_AddNumberToObject(o, "dur", (double)(t1 - t0) / 1e3);
    cJSON_AddNumberToObject(o, "pid", pid);
    cJSON_AddNumberToObject(o, "tid", e->thread);
    args = cJSON_AddObjectToObject(o, "args");
    cJSON_AddNumberToObject(args, "step", e->step);
    cJSON_AddStringToObject(args, "pass", profile_pass_name(e->pass));
    if (!e->region) {
        char layer[32];
        profile_layer_name(layer, sizeof layer, e->layer, r->cfg.n_layer);
        if (e->layer >= -1) cJSON_AddStringToObject(args, "layer", layer);
        cJSON_AddStringToObject(args, "shape", e->shape);
        if (e->flops > 0) cJSON_AddNumberToObject(args, "gflop", e->flops / 1e9);
        cJSON_AddNumberToObject(args, "mbytes", e->bytes / 1e6);
        hg_param_info pi;
        if (e->param >= 0 && hg_param_at(r->m, e->param, &pi) == HG_OK) cJSON_AddStringToObject(args, "param", pi.name);
    }
    cJSON_AddItemToArray(list, o);
}

static void add_meta(cJSON *list, const char *what, int pid, int tid, const char *name) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", what);
    cJSON_AddStringToObject(o, "ph", "M");
    cJSON_AddNumberToObject(o, "pid", pid);
    cJSON_AddNumberToObject(o, "tid", tid);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "args"), "name", name);
    cJSON_AddItemToArray(list, o);
}

int profile_write_trace(const prof_run *r, const char *path) {
    int pid = (int)getpid();
    char name[128];
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "traceEvents");
    snprintf(name, sizeof name, "handgrad profile: %s, batch %d, ctx %d, %d threads", r->preset, r->B, r->T, r->threads);
    add_meta(list, "process_name", pid, 0, name);
    for (int i = 0; i < r->nev; i++) {
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) seen = r->ev[k].thread == r->ev[i].thread;
        if (seen) continue;
        if (r->ev[i].thread == pid) snprintf(name, sizeof name, "main thread (ops run on %d OpenMP threads)", r->threads);
        else snprintf(name, sizeof name, "thread %d", r->ev[i].thread);
        add_meta(list, "thread_name", pid, r->ev[i].thread, name);
    }
    for (int i = 0; i < r->nev; i++)
        if (r->ev[i].step >= 0) add_event(list, r, &r->ev[i], pid);
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) {
        errno = ENOMEM;
        return -1;
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(text);
        errno = ENAMETOOLONG;
        return -1;
    }
    FILE *f = fopen(tmp, "wb");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f) ok = fclose(f) == 0 && ok;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        int saved = errno;
        remove(tmp);
        errno = saved;
        return -1;
    }
    return 0;
}
