/* End to end: the handgrad binary's bench --json prints one object with every field the
 * speed comparison reads, with sane values; bad flags exit non-zero with a message. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static char *run(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - 1 - len, p)) > 0) len += n;
    if (buf) buf[len] = '\0';
    *status = pclose(p);
    return buf;
}

static double field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) {
        fprintf(stderr, "bench json: no number '%s'\n", key);
        check_failures++;
        return -1;
    }
    return v->valuedouble;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_cli PATH/handgrad\n");
        return 2;
    }
    char cmd[4096];
    int st;
    snprintf(cmd, sizeof cmd, "%s bench --model tiny --batch 2 --ctx 32 --threads 2 --warmup 0 --steps 2 --json", argv[1]);
    char *out = run(cmd, &st);
    CHECK(out && st == 0);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(j != NULL);
    if (j) {
        const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
        CHECK(cJSON_IsString(model) && !strcmp(model->valuestring, "tiny"));
        CHECK(field(j, "batch") == 2 && field(j, "ctx") == 32 && field(j, "threads") == 2);
        const char *passes[] = {"forward", "forward_backward", "train_step"};
        for (int p = 0; p < 3; p++) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, passes[p]);
            CHECK(cJSON_IsObject(t));
            if (t) CHECK(field(t, "mean_s") > 0 && field(t, "std_s") >= 0);
        }
        CHECK(field(j, "tokens_per_s") > 0);
        CHECK(field(j, "model_gflop_per_step") > 0);
        CHECK(field(j, "sgemm_peak_gflops") > 1);
        CHECK(field(j, "achieved_gflops") > 0);
        double frac = field(j, "peak_fraction");
        CHECK(frac > 0 && frac < 2);
        CHECK(field(j, "peak_rss_bytes") > 1 << 20);
        cJSON_Delete(j);
    }
    free(out);
    snprintf(cmd, sizeof cmd, "%s bench --model nope 2>&1", argv[1]);
    out = run(cmd, &st);
    CHECK(st != 0 && out && strstr(out, "nope"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s frobnicate 2>&1", argv[1]);
    out = run(cmd, &st);
    CHECK(st != 0 && out && strstr(out, "unknown command"));
    free(out);
    CHECK_DONE();
}
