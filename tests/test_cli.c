/* End to end: `handgrad bench` prints one JSON object per row with every field
 * bench/compare_torch reads, with sane values, for the model ladder and the attention
 * sweep; CSV has a header and one line per row; a row that cannot fit is skipped, not an
 * error; --plot writes SVG files; bad input exits non-zero with a one-line message. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "handgrad.h"

static const char *exe;
static char plot_dir[] = "/tmp/hg_cli_XXXXXX";

/* Runs `handgrad ARGS` (2>&1 when merge), returns its stdout and exit status. */
static char *run(const char *args, int merge, int *status) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s%s", exe, args, merge ? " 2>&1" : "");
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 18, len = 0, n;
    char *buf = malloc(cap);
    while (buf && (n = fread(buf + len, 1, cap - 1 - len, p)) > 0) len += n;
    if (buf) buf[len] = '\0';
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
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

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static int is_true(const cJSON *o, const char *key) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key)); }

/* Splits JSON lines into rows; returns the count. */
static int parse_rows(char *out, cJSON **rows, int max) {
    int n = 0;
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line && n < max; line = strtok_r(NULL, "\n", &save)) {
        rows[n] = cJSON_Parse(line);
        CHECK(rows[n] != NULL);
        if (rows[n]) n++;
    }
    return n;
}

static void test_model_rows(void) {
    int st;
    char *out = run("bench --model tiny --batch 2 --ctx 32 --threads 2 --warmup 0 --steps 2 --json", 0, &st);
    CHECK(out && st == 0);
    cJSON *rows[8];
    int n = out ? parse_rows(out, rows, 8) : 0;
    CHECK(n == 3);
    const char *passes[] = {"forward", "backward", "step"};
    for (int i = 0; i < n && i < 3; i++) {
        const cJSON *j = rows[i];
        CHECK(!strcmp(str(j, "kind"), "model") && !strcmp(str(j, "model"), "tiny"));
        CHECK(!strcmp(str(j, "pass"), passes[i]));
        CHECK(field(j, "batch") == 2 && field(j, "ctx") == 32 && field(j, "threads") == 2);
        CHECK(field(j, "warmup") == 0 && field(j, "steps") == 2);
        CHECK(is_true(j, "training") && !is_true(j, "skipped"));
        CHECK(field(j, "params") == 132864); /* tiny: 2 layers of C=64, V=512, no wpe */
        CHECK(field(j, "std_s") >= 0);
        CHECK(field(j, "gflop") > 0 && field(j, "sgemm_peak_gflops") > 1);
        CHECK(field(j, "peak_rss_bytes") > 1 << 20);
#ifndef __SANITIZE_ADDRESS__ /* ASan's shadow memory is in no plan */
        CHECK(field(j, "estimate_bytes") >= field(j, "peak_rss_bytes")); /* the estimate is an upper bound */
#endif
        if (i != 1) { /* a difference of two noisy means may come out negative on a tiny model */
            CHECK(field(j, "mean_s") > 0 && field(j, "tokens_per_s") > 0 && field(j, "gflops") > 0);
            CHECK_CLOSE(field(j, "median_s"), field(j, "mean_s"), 1e-12, 1e-6); /* of two samples: their mean */
            double frac = field(j, "peak_fraction");
            CHECK(frac > 0 && frac < 2);
        } else {
            CHECK(field(j, "forward_backward_mean_s") > 0 && field(j, "forward_backward_std_s") >= 0);
        }
    }
    /* the three passes' FLOPs: forward 1/3, backward 2/3 of the step */
    if (n == 3) CHECK_CLOSE(field(rows[0], "gflop") + field(rows[1], "gflop"), field(rows[2], "gflop"), 1e-5, 0);
    for (int i = 0; i < n; i++) cJSON_Delete(rows[i]);
    free(out);

    /* CSV: a header, then one line per row with as many fields; and the plots, into a
     * folder two levels below plot_dir that does not exist yet (created as by mkdir -p) */
    char args[512];
    snprintf(args, sizeof args, "bench --model tiny,odd --batch 1 --ctx 16 --warmup 0 --steps 1 --pass forward --csv --plot %s/new/plots",
             plot_dir);
    out = run(args, 0, &st);
    CHECK(out && st == 0);
    if (out) {
        int lines = 0, commas[4] = {0};
        for (char *p = out; *p; p++) {
            if (*p == ',' && lines < 4) commas[lines]++;
            if (*p == '\n') lines++;
        }
        CHECK(lines == 3 && !strncmp(out, "kind,model,", 11));
        CHECK(commas[0] == commas[1] && commas[1] == commas[2]);
        CHECK(strstr(out, "\nmodel,tiny,") && strstr(out, "\nmodel,odd,"));
    }
    free(out);
}

/* Rows that cannot fit in any machine's memory are reported, not run. */
static void test_skipped(void) {
    int st;
    char *out = run("bench --model small --batch 65536 --ctx 1024 --warmup 0 --steps 1 --json", 0, &st);
    CHECK(out && st == 0);
    cJSON *rows[8];
    int n = out ? parse_rows(out, rows, 8) : 0;
    CHECK(n == 3);
    for (int i = 0; i < n; i++) {
        CHECK(is_true(rows[i], "skipped"));
        CHECK(strstr(str(rows[i], "note"), "skipped: needs ") && strstr(str(rows[i], "note"), " GiB, have "));
        CHECK(field(rows[i], "estimate_bytes") > field(rows[i], "available_bytes"));
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(rows[i], "mean_s")));
        cJSON_Delete(rows[i]);
    }
    free(out);
    out = run("bench --model small --batch 65536 --ctx 1024 --warmup 0 --steps 1 --pass step", 0, &st);
    CHECK(out && st == 0 && strstr(out, "skipped: needs "));
    free(out);
}

static void test_attention(void) {
    int st;
    char args[512];
    snprintf(args, sizeof args, "bench --attention --head-dims 16,32 --ctx 64,130 --batch 2 --threads 2 --warmup 0 --steps 2 --json --svg %s",
             plot_dir);
    char *out = run(args, 0, &st);
    CHECK(out && st == 0);
    cJSON *rows[8];
    int n = out ? parse_rows(out, rows, 8) : 0;
    CHECK(n == 4);
    for (int i = 0; i < n; i++) {
        const cJSON *j = rows[i];
        int hs = i < 2 ? 16 : 32, T = i % 2 ? 130 : 64;
        CHECK(!strcmp(str(j, "kind"), "attention"));
        CHECK(field(j, "head_dim") == hs && field(j, "ctx") == T && field(j, "batch") == 2 && field(j, "heads") == 1);
        CHECK(is_true(j, "causal") && !is_true(j, "skipped"));
        CHECK(field(j, "forward_ms") > 0 && field(j, "backward_ms") > 0);
        CHECK_CLOSE(field(j, "forward_gflop"), 4.0 * 2 * T * T * hs / 2 / 1e9, 1e-5, 0);
        CHECK_CLOSE(field(j, "backward_gflop"), 2.5 * field(j, "forward_gflop"), 1e-5, 0);
        CHECK(field(j, "tflops") > 0 && field(j, "peak_fraction") > 0);
        /* q, k, v, out, lse, their gradients: at least 2*(3+1)*B*T*hs floats */
        CHECK(field(j, "op_bytes") >= 4.0 * 2 * 4 * 2 * T * hs);
        CHECK(field(j, "peak_rss_bytes") >= field(j, "op_bytes"));
        cJSON_Delete(rows[i]);
    }
    free(out);
    out = run("bench --attention --no-causal --head-dims 16 --ctx 32 --batch 1 --threads 2 --warmup 0 --steps 1 --json", 0, &st);
    CHECK(out && st == 0 && strstr(out, "\"causal\": false"));
    free(out);
}

/* bench --fit: a row per model and setting from the memory plan, nothing run; the
 * settings order as the columns say (bf16 with recompute below bf16, LoRA below both),
 * and "fits" exactly where the need is within what is available. */
static void test_fit(void) {
    int st;
    char *out = run("bench --fit --model small,2.7B --ctx 256 --threads 1 --json", 0, &st);
    CHECK(out && st == 0);
    double need[2][5] = {{0}};
    int rows = 0, consistent = 1;
    for (char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        const char *model = cJSON_GetObjectItem(j, "model")->valuestring, *set = cJSON_GetObjectItem(j, "setting")->valuestring;
        static const char *const names[] = {"fp32", "bf16", "bf16 block", "LoRA bf16", "LoRA bf16 block"};
        for (int k = 0; k < 5; k++)
            if (!strcmp(set, names[k])) need[strcmp(model, "small") != 0][k] = field(j, "need_bytes"), rows++;
        consistent &= !strcmp(cJSON_GetObjectItem(j, "fits")->valuestring, "yes") ==
                      (field(j, "need_bytes") <= field(j, "available_bytes"));
        cJSON_Delete(j);
    }
    CHECK(rows == 10);
    for (int m = 0; m < 2; m++)
        CHECK(need[m][0] > 0 && need[m][2] < need[m][1] && need[m][3] < need[m][2] && need[m][4] < need[m][3]);
    CHECK(need[1][0] > 40e9 && consistent); /* 16 bytes a parameter of 2.65B */
    free(out);
}

/* HANDGRAD_TILES: a kernel this CPU runs is the one bench reports; any other name is
 * refused before the command runs, with the names that would do. */
static void test_tiles_env(void) {
    int st;
    setenv("HANDGRAD_TILES", "portable", 1);
    char *out = run("bench --attention --head-dims 16 --ctx 32 --batch 1 --threads 1 --warmup 0 --steps 1", 0, &st);
    CHECK(out && st == 0 && strstr(out, "; CPU attention tiles: portable\n"));
    free(out);
    setenv("HANDGRAD_TILES", "neon", 1);
    out = run("bench --attention --head-dims 16 --ctx 32 --batch 1 --threads 1 --warmup 0 --steps 1", 1, &st);
    CHECK(out && st == 2 && strstr(out, "HANDGRAD_TILES=neon: not a tile kernel") && strstr(out, "portable)"));
    CHECK(out && !strstr(out, "Head dim")); /* refused before the command ran */
    free(out);
    unsetenv("HANDGRAD_TILES");
}

/* The plots written by the runs above: the model ladder's in the folder --plot created. */
static void test_plots(void) {
    const char *files[] = {"new/plots/bench_time.svg", "new/plots/bench_gflops.svg", "attention_time.svg",
                           "attention_memory.svg"};
    for (int i = 0; i < 4; i++) {
        char path[600], head[8] = {0};
        snprintf(path, sizeof path, "%s/%s", plot_dir, files[i]);
        FILE *f = fopen(path, "r");
        CHECK(f && fread(head, 1, 5, f) == 5 && !strcmp(head, "<svg "));
        if (f) fclose(f);
        remove(path);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/new/plots", plot_dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/new", plot_dir);
    rmdir(path);
    rmdir(plot_dir);
}

/* Each bad input: a non-zero exit and one line naming the problem. */
/* --recompute: the memory each mode keeps, the same losses, and the step's description
 * (profile --plan) saying what the backward runs again. */
static void test_recompute(void) {
    int st;
    double kept[2] = {0, 0};
    const char *modes[] = {"none", "block"};
    for (int i = 0; i < 2; i++) {
        char args[256];
        snprintf(args, sizeof args, "bench --model tiny --batch 2 --ctx 32 --threads 2 --warmup 0 --steps 1 --pass step "
                 "--recompute %s --json", modes[i]);
        char *out = run(args, 0, &st);
        CHECK(out && st == 0);
        cJSON *rows[2];
        int n = out ? parse_rows(out, rows, 2) : 0;
        CHECK(n == 1);
        if (n == 1) {
            CHECK(!strcmp(str(rows[0], "recompute"), modes[i]));
            kept[i] = field(rows[0], "activations_bytes"); /* the plan's, not the process's RSS */
            cJSON_Delete(rows[0]);
        }
        free(out);
    }
    CHECK(kept[1] < kept[0]);
    char *out = run("profile --model tiny --batch 2 --ctx 32 --threads 2 --recompute attn --plan", 0, &st);
    CHECK(out && st == 0 && strstr(out, "recompute attn") && strstr(out, "matmul c_attn forward (recompute)") &&
          strstr(out, "kept") && strstr(out, "scratch"));
    free(out);
}

static void test_bad_input(void) {
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"bench --model nope", "nope"},
        {"bench --model small,nope", "nope"},
        {"bench --batch 0", "--batch"},
        {"bench --ctx 2048", "max_seq_len"},
        {"bench --ctx 256,-1", "--ctx"},
        {"bench --model tiny --batch 1048577 --ctx 64", "batch"},
        {"bench --steps 0", "--steps"},
        {"bench --warmup -1", "--warmup"},
        {"bench --pass sideways", "sideways"},
        {"bench --d-model 0 --layers 1 --heads 1", "--d-model"},
        {"bench --d-model 96 --layers 2", "--n-head"},
        {"bench --d-model 100 --layers 2 --heads 3", "n_head"},
        {"bench --model tiny,odd --layers 3", "list"},
        {"bench --attention --head-dims 24", "16"},
        {"bench --attention --model small", "--attention"},
        {"bench --head-dims 16", "--attention"},
        {"bench --plot /dev/null/dir", "--plot /dev/null/dir: cannot create the folder: /dev/null is a file"},
        {"bench extra", "extra"},
        {"bench --recompute sideways", "--recompute"},
        {"profile --recompute all --plan", "--recompute"},
        {"frobnicate", "unknown command"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st;
        char *out = run(cases[i].args, 1, &st);
        int ok = out && st != 0 && strstr(out, cases[i].want);
        if (!ok) fprintf(stderr, "'%s': exit %d, output: %s\n", cases[i].args, st, out ? out : "(none)");
        CHECK(ok);
        /* one line (usage text follows only an unknown flag or command) */
        if (out && strcmp(cases[i].args, "frobnicate")) CHECK(strchr(out, '\n') == out + strlen(out) - 1);
        free(out);
    }
}

/* What every command shares: -h and --help print its usage, within 80 columns, and exit
 * 0 (the commands that build a model list the same model flags); --version prints the
 * version and exits 0; an unknown option is one line naming it, exit status 2; and
 * handgrad --help documents the exit statuses. */
static void test_common_options(void) {
    static const char *cmds[] = {"bench", "tokenizer", "prepare", "profile", "train", "generate", "export", "ops"};
    char args[128], want[64];
    snprintf(want, sizeof want, "handgrad %s (library %s)\n", HG_VERSION_STRING, hg_version());
    for (int i = 0; i < 8; i++) {
        int st;
        for (int h = 0; h < 2; h++) {
            snprintf(args, sizeof args, "%s %s", cmds[i], h ? "--help" : "-h");
            char *out = run(args, 1, &st);
            if (!(out && st == 0 && strstr(out, "usage: handgrad"))) {
                fprintf(stderr, "handgrad %s: status %d\n", args, st);
                check_failures++;
            }
            /* within 80 columns */
            for (const char *l = out; l && *l; l = strchr(l, '\n') + 1)
                if (strchr(l, '\n') - l > 80) {
                    fprintf(stderr, "handgrad %s: a line of %d columns: %.*s\n", args, (int)(strchr(l, '\n') - l),
                            (int)(strchr(l, '\n') - l), l);
                    check_failures++;
                }
            /* the commands that build a model from a preset spell its flags the same */
            static const char *shape[] = {"--model ", "--arch F=V,...", "--n-layer L", "--n-head NH", "--d-model C",
                                          "--d-ff F", "--max-seq-len TMAX", "--vocab-size V"};
            int builds = !strcmp(cmds[i], "bench") || !strcmp(cmds[i], "profile") || !strcmp(cmds[i], "train") ||
                         !strcmp(cmds[i], "ops");
            for (int k = 0; builds && out && k < 8; k++)
                if (!strstr(out, shape[k])) {
                    fprintf(stderr, "handgrad %s: no %s\n", args, shape[k]);
                    check_failures++;
                }
            free(out);
        }
        snprintf(args, sizeof args, "%s --version", cmds[i]);
        char *out = run(args, 1, &st);
        CHECK(out && st == 0 && !strcmp(out, want));
        free(out);
        snprintf(args, sizeof args, "%s --bogus-option", cmds[i]);
        out = run(args, 1, &st);
        int lines = 0;
        for (const char *c = out; c && *c; c++) lines += *c == '\n';
        if (!(out && st == 2 && strstr(out, "--bogus-option") && lines == 1)) {
            fprintf(stderr, "handgrad %s: status %d, %d lines: %s\n", args, st, lines, out ? out : "");
            check_failures++;
        }
        free(out);
    }
    int st;
    char *out = run("--help", 1, &st);
    CHECK(out && st == 0 && strstr(out, "Exit status: 0 success") && strstr(out, "130 after Ctrl-C"));
    free(out);
    out = run("--version", 1, &st);
    CHECK(out && st == 0 && !strcmp(out, want));
    free(out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_cli PATH/handgrad\n");
        return 2;
    }
    exe = argv[1];
    if (!mkdtemp(plot_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_model_rows();
    test_skipped();
    test_attention();
    test_fit();
    test_tiles_env();
    test_plots();
    test_recompute();
    test_bad_input();
    test_common_options();
    CHECK_DONE();
}
