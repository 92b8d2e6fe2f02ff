#define _DEFAULT_SOURCE /* usleep */
/* End to end: `handgrad train` on a tiny model and a generated corpus.
 *  - two runs with one seed and thread count give identical losses (train.jsonl);
 *  - N steps, stop, resume to 2N equals an uninterrupted 2N run, bit for bit;
 *  - SIGINT mid-run saves a checkpoint and exits 0; resuming equals the uninterrupted
 *    run; a second SIGINT aborts at once;
 *  - one writer per run folder: a second run on a folder in use is refused at once,
 *    naming the holder's pid;
 *  - a checkpoint write that fails part way (a file size limit) keeps the previous one
 *    whole, leaves no temporary behind, and the run resumes from it exactly;
 *  - a config file with flag overrides; gradient accumulation; --keep-last; samples;
 *    --init-from-hf keeps a Hugging Face folder's weights bit for bit at lr 0;
 *  - the NaN guard: a poisoned step is skipped, K in a row stop the run, and no
 *    checkpoint ever holds NaN or Inf;
 *  - bad input (flags, values, checkpoints of another shape, corrupt safetensors,
 *    a tokenizer of another vocabulary, an unwritable --out): a one-line error naming
 *    the flag or file, a non-zero exit, and no run folder left behind;
 *  - --device, --precision, --deterministic and --cuda-graphs: cpu and fp32 given
 *    explicitly (and --deterministic, which the CPU always is, and --cuda-graphs, which
 *    it ignores) train as the defaults do,
 *    and run.json keeps them; --device cuda without a usable GPU, bf16 on the CPU and
 *    ZeRO-1 on CUDA are refused in one line naming the flag (a resume too, leaving the
 *    run as it was).
 * Usage: test_train_cli PATH/handgrad */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/timer.h"
#include "handgrad.h"
#include "io/safetensors.h"
#include "model/gpt.h"

static const char *hg;
static char work[256];
static char tiny[1024]; /* flags of the tiny model and its data */

/* Runs a shell command; returns its exit status (128 + signal when killed) and, when out
 * is given, its stdout and stderr. */
static int sh(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sh(char **out, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[8300];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t cap = 1 << 16, len = 0, n;
    char *buf = malloc(cap);
    while (buf && (n = fread(buf + len, 1, cap - 1 - len, p)) > 0) {
        len += n;
        if (len + 1 == cap) {
            char *g = realloc(buf, cap *= 2);
            if (!g) break;
            buf = g;
        }
    }
    if (buf) buf[len] = 0;
    int st = pclose(p);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (out) *out = buf;
    else free(buf);
    return rc;
}

typedef struct series {
    double loss[4096];
    int64_t step[4096];
    int n, skipped, evals, samples;
} series;

/* The step records of a run's train.jsonl. */
static int read_log(const char *dir, series *s) {
    memset(s, 0, sizeof *s);
    char path[512], line[1 << 16];
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        const cJSON *loss = cJSON_GetObjectItemCaseSensitive(j, "loss");
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
        if (!cJSON_IsString(type) || !cJSON_IsNumber(step)) check_failures++, fprintf(stderr, "bad log line: %s", line);
        else if (!strcmp(type->valuestring, "step") && s->n < 4096) {
            s->step[s->n] = (int64_t)step->valuedouble;
            s->loss[s->n++] = cJSON_IsNumber(loss) ? loss->valuedouble : NAN;
            s->skipped += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "skipped"));
        } else if (!strcmp(type->valuestring, "eval")) s->evals++;
        else if (!strcmp(type->valuestring, "sample")) s->samples++;
        cJSON_Delete(j);
    }
    fclose(f);
    return s->n;
}

/* Steps 1..n in order with bitwise equal losses. */
static int same_losses(const series *a, const series *b) {
    if (a->n != b->n || a->n == 0) return fprintf(stderr, "runs have %d and %d steps\n", a->n, b->n), 0;
    for (int i = 0; i < a->n; i++)
        if (a->step[i] != i + 1 || b->step[i] != i + 1 || memcmp(&a->loss[i], &b->loss[i], sizeof(double))) {
            fprintf(stderr, "step %d: losses %.9g and %.9g\n", i + 1, a->loss[i], b->loss[i]);
            return 0;
        }
    return 1;
}

static int exists(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int exists(const char *fmt, ...) {
    char p[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, sizeof p, fmt, ap);
    va_end(ap);
    return access(p, F_OK) == 0;
}

/* Every tensor of a checkpoint's two files is finite. */
static int finite_checkpoint(const char *ckpt) {
    const char *files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int k = 0; k < 2; k++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", ckpt, files[k]);
        hg_st_file *f;
        if (hg_st_open(&f, p) != HG_OK) return 0;
        for (int i = 0; i < hg_st_count(f); i++) {
            const hg_st_tensor *t = hg_st_at(f, i);
            for (int64_t j = 0; j < t->numel; j++) {
                float v;
                memcpy(&v, t->data + 4 * j, 4);
                if (!isfinite(v)) {
                    hg_st_close(f);
                    return 0;
                }
            }
        }
        hg_st_close(f);
    }
    return 1;
}

static void make_data(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/corpus.txt", work);
    FILE *f = fopen(p, "w");
    static const char *w[] = {"the", "lord", "said", "unto", "moses", "and", "he", "went", "up", "into", "mountain",
                              "of", "god", "people", "land", "water", "day", "night", "light", "earth"};
    uint32_t x = 7;
    for (int line = 0; line < 3000; line++) {
        int n = 5 + line % 9;
        for (int i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            fprintf(f, "%s%s", i ? " " : "", w[(x >> 16) % 20]);
        }
        fputs(".\n", f);
    }
    fclose(f);
    CHECK(sh(NULL, "mkdir %s/data && %s tokenizer train --vocab-size 320 --out %s/data/tokenizer %s/corpus.txt", work, hg, work, work) == 0);
    CHECK(sh(NULL, "%s prepare --quiet --tokenizer %s/data/tokenizer --out %s/data --val-fraction 0.1 %s/corpus.txt",
             hg, work, work, work) == 0);
    snprintf(tiny, sizeof tiny,
             "--train '%s/data/train_*.bin' --val '%s/data/val_*.bin' --n-layer 2 --n-head 2 --d-model 32 --ctx 32 "
             "--batch 4 --threads 1 --peak-gflops 100 --eval-every 10 --eval-batches 2 --dropout 0.1 --warmup-steps 3 "
             "--lr 3e-3",
             work, work);
}

/* A checkpoint folder is a Hugging Face folder: config.json describes the model the
 * weights' own metadata does, names the tokenizer's end-of-text id, the tokenizer files
 * transformers reads are there, and loading it as a Hugging Face folder gives the
 * parameters that loading it as a checkpoint gives. */
static void hf_ready(const char *ckpt) {
    char p[700], why[256] = "";
    hg_config from_json, from_weights;
    snprintf(p, sizeof p, "%s/config.json", ckpt);
    CHECK(hg_hf_config_load(p, &from_json) == HG_OK);
    snprintf(p, sizeof p, "%s/model.safetensors", ckpt);
    CHECK(hg_checkpoint_config(p, &from_weights) == HG_OK);
    CHECK(gpt_same_architecture(&from_json, &from_weights, why, sizeof why));
    if (why[0]) fprintf(stderr, "config.json against the weights: %s\n", why);
    hg_hf_special sp;
    hg_tokenizer *tok = NULL;
    CHECK(hg_hf_special_ids(ckpt, &sp) == HG_OK && hg_tokenizer_load(&tok, ckpt) == HG_OK);
    CHECK(tok && sp.n_eos == 1 && sp.eos[0] == hg_tokenizer_eot(tok) && sp.eos[0] >= 0);
    hg_tokenizer_free(tok);
    CHECK(exists("%s/vocab.json", ckpt) && exists("%s/merges.txt", ckpt) && exists("%s/tokenizer_config.json", ckpt));
    hg_options o = hg_options_default();
    o.threads = 1;
    hg_model *a = NULL, *b = NULL;
    CHECK(hg_model_load_hf(&a, ckpt, &o) == HG_OK);
    CHECK(hg_model_create(&b, &from_weights, &o) == HG_OK && hg_model_load(b, p) == HG_OK);
    for (int i = 0; a && b && i < hg_param_count(a); i++) {
        hg_param_info x, y;
        CHECK(hg_param_at(a, i, &x) == HG_OK && hg_param_at(b, i, &y) == HG_OK);
        CHECK(!memcmp(x.data, y.data, sizeof(float) * (size_t)x.numel));
    }
    hg_model_free(a);
    hg_model_free(b);
}

static void deterministic(void) {
    series a, b;
    CHECK(sh(NULL, "%s train %s --out %s/d1 --max-steps 12 --sequential --threads 2", hg, tiny, work) == 0);
    CHECK(sh(NULL, "%s train %s --out %s/d2 --max-steps 12 --sequential --threads 2 --device cpu --precision fp32 "
             "--deterministic --cuda-graphs", hg, tiny, work) == 0);
    char d[512];
    snprintf(d, sizeof d, "%s/d1", work);
    read_log(d, &a);
    snprintf(d, sizeof d, "%s/d2", work);
    read_log(d, &b);
    CHECK(same_losses(&a, &b)); /* the CPU is deterministic with or without --deterministic;
                                   it records no CUDA graphs */
    CHECK(a.evals == 2 && a.loss[11] < a.loss[0]);
    char *json = NULL; /* a setting of the run, kept for --resume */
    sh(&json, "cat %s/d2/run.json", work);
    cJSON *rj = json ? cJSON_Parse(json) : NULL;
    CHECK(rj && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rj, "deterministic")));
    CHECK(rj && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rj, "cuda-graphs")));
    cJSON_Delete(rj);
    free(json);
    CHECK(exists("%s/d1/loss.svg", work) && exists("%s/d1/ckpt_00000012/model.safetensors", work));
    snprintf(d, sizeof d, "%s/d1/ckpt_00000012", work);
    hf_ready(d);
}

/* N steps, stop, resume to 2N == 2N in one go (constant schedule after warmup, so the
 * first run's --max-steps does not change the learning rates). */
static void resume_exact(void) {
    char d[512];
    series ref, res;
    CHECK(sh(NULL, "%s train %s --out %s/r_ref --max-steps 20 --lr-schedule constant", hg, tiny, work) == 0);
    CHECK(sh(NULL, "%s train %s --out %s/r_res --max-steps 10 --lr-schedule constant", hg, tiny, work) == 0);
    char *out = NULL;
    CHECK(sh(&out, "%s train --resume --out %s/r_res --max-steps 20", hg, work) == 0);
    CHECK(out && strstr(out, "resuming at step 10"));
    free(out);
    snprintf(d, sizeof d, "%s/r_ref", work);
    read_log(d, &ref);
    snprintf(d, sizeof d, "%s/r_res", work);
    read_log(d, &res);
    CHECK(same_losses(&ref, &res));
    CHECK(ref.evals == 2 && res.evals == 2);
    /* a resumed run that is already done trains nothing */
    CHECK(sh(&out, "%s train --resume --out %s/r_res", hg, work) == 0);
    CHECK(out && strstr(out, "nothing to train"));
    free(out);
}

/* --optim-state bf16 with --grad-precision bf16, two micro-batches a step: N steps,
 * stop, resume to 2N == 2N in one go (the stochastic rounding's draws depend on the step
 * alone), the moments on disk in BF16; and the run resumes under fp32 moments too
 * (widened). */
static void optim_state_bf16(void) {
    char d[512];
    series ref, res;
    const char *compact = "--lr-schedule constant --optim-state bf16 --grad-precision bf16 --total-batch-tokens 256";
    CHECK(sh(NULL, "%s train %s --out %s/o_ref --max-steps 20 %s", hg, tiny, work, compact) == 0);
    CHECK(sh(NULL, "%s train %s --out %s/o_res --max-steps 10 %s", hg, tiny, work, compact) == 0);
    CHECK(sh(NULL, "%s train --resume --out %s/o_res --max-steps 20", hg, work) == 0);
    snprintf(d, sizeof d, "%s/o_ref", work);
    read_log(d, &ref);
    snprintf(d, sizeof d, "%s/o_res", work);
    read_log(d, &res);
    CHECK(same_losses(&ref, &res) && ref.loss[19] < ref.loss[0]);
    snprintf(d, sizeof d, "%s/o_res/ckpt_00000010/optimizer.safetensors", work);
    hg_st_file *f = NULL;
    CHECK(hg_st_open(&f, d) == HG_OK);
    const hg_st_tensor *t = f ? hg_st_find(f, "m.h.0.mlp.c_fc.weight") : NULL;
    CHECK(t && t->dtype == HG_ST_BF16);
    hg_st_close(f);
    char *out = NULL;
    CHECK(sh(&out, "%s train --resume --out %s/o_res --max-steps 24 --optim-state fp32", hg, work) == 0);
    free(out);
    snprintf(d, sizeof d, "%s/o_res/ckpt_00000024/optimizer.safetensors", work);
    f = NULL;
    CHECK(hg_st_open(&f, d) == HG_OK);
    t = f ? hg_st_find(f, "m.h.0.mlp.c_fc.weight") : NULL;
    CHECK(t && t->dtype == HG_ST_F32);
    hg_st_close(f);
}

/* The loss band travels in the checkpoint (band.json): a run with --skip-outliers that
 * stops inside an excursion resumes to the same losses and weights, bit for bit, as one
 * that did not stop (with an empty band the resumed steps were judged afresh and some
 * updates taken). train.jsonl is cut back in place, the same file, so a `tail -f` of a
 * resumed run goes on. */
static void band_resume_exact(void) {
    const char *band = "--lr 0.3 --lr-schedule constant --skip-outliers --loss-band-z 0.3 --ckpt-every 6 --keep-last 0";
    char d[512], p[600];
    series ref, res;
    CHECK(sh(NULL, "%s train %s %s --out %s/b_ref --max-steps 24", hg, tiny, band, work) == 0);
    CHECK(sh(NULL, "%s train %s %s --out %s/b_res --max-steps 24 && rm -r %s/b_res/ckpt_00000018 %s/b_res/ckpt_00000024",
             hg, tiny, band, work, work, work) == 0);
    snprintf(p, sizeof p, "%s/b_res/train.jsonl", work);
    struct stat before, after;
    CHECK(stat(p, &before) == 0);
    char *out = NULL;
    CHECK(sh(&out, "%s train --resume --out %s/b_res", hg, work) == 0);
    CHECK(out && strstr(out, "resuming at step 12"));
    free(out);
    CHECK(stat(p, &after) == 0 && after.st_ino == before.st_ino);
    snprintf(d, sizeof d, "%s/b_ref", work);
    read_log(d, &ref);
    snprintf(d, sizeof d, "%s/b_res", work);
    read_log(d, &res);
    CHECK(same_losses(&ref, &res) && ref.skipped == res.skipped);
    CHECK(ref.skipped > 0 && ref.skipped < ref.n); /* the band judged both ways */
    if (!(ref.skipped > 0 && ref.skipped < ref.n)) fprintf(stderr, "band resume: %d of %d skipped\n", ref.skipped, ref.n);
    CHECK(sh(NULL, "cmp %s/b_ref/ckpt_00000024/model.safetensors %s/b_res/ckpt_00000024/model.safetensors", work, work) == 0);
}

/* Starts a run in the background; returns its pid. */
static pid_t spawn(const char *args, const char *log) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", args, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits until a run's log has at least n steps (or 30 s pass). */
static void wait_steps(const char *dir, int n) {
    series s;
    for (int i = 0; i < 3000 && read_log(dir, &s) < n; i++) usleep(10000);
}

static int wait_exit(pid_t pid) {
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void sigint_then_resume(void) {
    char d[512], args[4096], log[512];
    series ref, res;
    const int M = 200; /* long enough that the interrupt lands mid-run */
    CHECK(sh(NULL, "%s train %s --out %s/s_ref --max-steps %d --eval-every 100", hg, tiny, work, M) == 0);
    snprintf(d, sizeof d, "%s/s_int", work);
    snprintf(log, sizeof log, "%s/s_int.log", work);
    snprintf(args, sizeof args, "exec %s train %s --out %s --max-steps %d --eval-every 100", hg, tiny, d, M);
    pid_t pid = spawn(args, log);
    wait_steps(d, 5);
    kill(pid, SIGINT);
    CHECK(wait_exit(pid) == 128 + SIGINT); /* 130, as a shell reports Ctrl-C, after the checkpoint */
    char *out = NULL;
    sh(&out, "cat %s", log);
    CHECK(out && strstr(out, "stopped by SIGINT") && strstr(out, "--resume"));
    free(out);
    read_log(d, &res);
    CHECK(res.n >= 5 && res.n < M);
    CHECK(exists("%s/ckpt_%08d/optimizer.safetensors", d, res.n));
    CHECK(sh(NULL, "%s train --resume --out %s", hg, d) == 0);
    snprintf(args, sizeof args, "%s/s_ref", work);
    read_log(args, &ref);
    read_log(d, &res);
    CHECK(same_losses(&ref, &res));
    CHECK(res.evals == ref.evals);

    /* a second SIGINT aborts at once, killed by the signal */
    snprintf(d, sizeof d, "%s/s_abort", work);
    snprintf(args, sizeof args, "exec %s train %s --out %s --max-steps 100000", hg, tiny, d);
    pid = spawn(args, log);
    wait_steps(d, 3);
    kill(pid, SIGINT);
    usleep(1000);
    kill(pid, SIGINT);
    int rc = wait_exit(pid);
    CHECK(rc == 128 + SIGINT); /* killed by it, or stopped cleanly when the checkpoint beat it */
    sh(&out, "cat %s", log);
    CHECK(out && (strstr(out, "aborting") || strstr(out, "stopped by SIGINT")));
    free(out);
}

/* Resuming before the first checkpoint takes the settings the run wrote into its folder
 * at start; resuming on other shards than the checkpoint's is refused, naming the first
 * difference, unless --allow-data-change (then a warning); a stop on a step that
 * evaluates still logs the evaluation; --eval-every without --val is warned about. */
static void resume_guards(void) {
    char d[512], args[4096], log[512];
    snprintf(d, sizeof d, "%s/g_early", work);
    snprintf(log, sizeof log, "%s/g_early.log", work);
    snprintf(args, sizeof args, "exec %s train %s --out %s --max-steps 100000 --lr 2e-3", hg, tiny, d);
    pid_t pid = spawn(args, log);
    wait_steps(d, 2);
    kill(pid, SIGKILL); /* no checkpoint yet */
    wait_exit(pid);
    CHECK(!exists("%s/ckpt_00000001", d) && exists("%s/run.json", d));
    char *out = NULL;
    CHECK(sh(&out, "%s train --resume --out %s --max-steps 3", hg, d) == 0);
    CHECK(out && strstr(out, "starting from step 0 with its run.json"));
    free(out);
    CHECK(sh(&out, "grep -c '\"lr\":[[:space:]]*0.002' %s/ckpt_00000003/run.json", d) == 0); /* the first run's --lr */
    free(out);
    /* other shards: one more file */
    CHECK(sh(NULL, "mkdir %s/data2 && cp -r %s/data/. %s/data2/ && cp %s/data2/train_000000.bin %s/data2/train_000001.bin",
             work, work, work, work, work) == 0);
    CHECK(sh(&out, "%s train --resume --out %s --max-steps 5 --train '%s/data2/train_*.bin'", hg, d, work) == 1);
    CHECK(out && strstr(out, "differs from the data recorded in") && strstr(out, "2 file(s), was 1 (first new: train_000001.bin)") &&
          strstr(out, "--allow-data-change"));
    free(out);
    CHECK(sh(&out, "%s train --resume --out %s --max-steps 5 --train '%s/data2/train_*.bin' --allow-data-change", hg, d,
             work) == 0);
    CHECK(out && strstr(out, "warning: --train") && strstr(out, "resuming at step 3"));
    free(out);
    /* the same names, one file changed in its head */
    CHECK(sh(NULL, "cp %s/data/val_000000.bin %s/data2/train_000001.bin", work, work) == 0);
    CHECK(sh(&out, "%s train --resume --out %s --max-steps 6 --train '%s/data2/train_*.bin'", hg, d, work) == 1);
    CHECK(out && strstr(out, "train_000001.bin: ") && strstr(out, "bytes, was"));
    free(out);
    /* a SIGINT on a step that evaluates still logs that evaluation (every step does here) */
    snprintf(d, sizeof d, "%s/g_eval", work);
    snprintf(args, sizeof args, "exec %s train %s --out %s --max-steps 60 --eval-every 1", hg, tiny, d);
    pid = spawn(args, log);
    wait_steps(d, 3);
    kill(pid, SIGINT);
    CHECK(wait_exit(pid) == 128 + SIGINT);
    series part;
    read_log(d, &part);
    CHECK(part.n < 60 && part.evals == part.n);
    if (part.evals != part.n) fprintf(stderr, "stopped at step %d with %d evaluations\n", part.n, part.evals);
    CHECK(sh(NULL, "%s train --resume --out %s", hg, d) == 0);
    read_log(d, &part);
    CHECK(part.n == 60 && part.evals == 60);
    /* --eval-every without --val evaluates nothing: said once */
    CHECK(sh(&out, "%s train --train '%s/data/train_*.bin' --n-layer 1 --n-head 2 --d-model 32 --ctx 16 --batch 2 "
                   "--max-steps 1 --threads 1 --peak-gflops 100 --eval-every 5 --out %s/g_noval", hg, work, work) == 0);
    CHECK(out && strstr(out, "warning: --eval-every 5 without --val"));
    free(out);
}

/* A second run on a folder in use, resumed or fresh, is refused at once with the holder's
 * pid, and writes nothing there; once the first run ends, the folder is free. */
static void two_writers(void) {
    char d[512], args[4096], log[512], pid_text[32];
    snprintf(d, sizeof d, "%s/w_one", work);
    snprintf(log, sizeof log, "%s/w_one.log", work);
    snprintf(args, sizeof args, "exec %s train %s --out %s --max-steps 100000 --ckpt-every 2", hg, tiny, d);
    pid_t pid = spawn(args, log);
    wait_steps(d, 3);
    snprintf(pid_text, sizeof pid_text, "pid %d on ", (int)pid);
    const char *second[] = {"--resume --lr 1e-3 --max-steps 8", "--max-steps 8"}; /* bounded if let through */
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        double t0 = hg_now();
        int rc = sh(&out, "%s train %s --out %s %s", hg, tiny, d, second[i]);
        CHECK(rc == 1 && out && strstr(out, "in use by another run") && strstr(out, pid_text));
        CHECK(hg_now() - t0 < 20.0); /* refused before any model or data is built */
        if (rc != 1) fprintf(stderr, "second writer (%s): status %d, output: %s\n", second[i], rc, out ? out : "");
        free(out);
    }
    kill(pid, SIGINT);
    CHECK(wait_exit(pid) == 128 + SIGINT);
    series s;
    CHECK(read_log(d, &s) >= 3);
    for (int k = 0; k < s.n; k++) CHECK(s.step[k] == k + 1); /* one run's steps, in order */
    CHECK(sh(NULL, "flock -n %s/.lock true", d) == 0); /* free again */
}

/* A file size limit makes the checkpoint at step 20 fail part way, as a full disk would:
 * the run stops with an error, step 10's checkpoint is untouched, nothing temporary is
 * left, and resuming from step 10 gives the uninterrupted losses. */
static void failed_write(void) {
    char d[512];
    series ref, res;
    snprintf(d, sizeof d, "%s/w", work);
    CHECK(sh(NULL, "%s train %s --out %s --max-steps 30 --ckpt-every 10 --eval-every 0", hg, tiny, d) == 0);
    CHECK(sh(NULL, "rm -r %s/ckpt_00000030 %s/ckpt_00000020 && cp -r %s %s.ref", d, d, d, d) == 0);
    /* resumed at step 10 under a 40-block file size limit: the weights at step 20 do not fit */
    char *out = NULL;
    int rc = sh(&out, "ulimit -f 40 && exec %s train --resume --out %s --max-steps 30 --ckpt-every 10 --eval-every 0", hg, d);
    CHECK(rc == 1 && out && strstr(out, "checkpoint at step 20 failed") && strstr(out, "intact"));
    free(out);
    CHECK(exists("%s/ckpt_00000010/model.safetensors", d) && !exists("%s/ckpt_00000020", d));
    CHECK(!exists("%s/ckpt_00000020.tmp", d));
    CHECK(sh(NULL, "diff -r %s/ckpt_00000010 %s.ref/ckpt_00000010", d, d) == 0);
    CHECK(sh(NULL, "%s train --resume --out %s", hg, d) == 0);
    read_log(d, &res);
    snprintf(d, sizeof d, "%s/w_ref", work);
    CHECK(sh(NULL, "%s train %s --out %s --max-steps 30 --eval-every 0", hg, tiny, d) == 0);
    read_log(d, &ref);
    CHECK(same_losses(&ref, &res));
}

/* The log on a full disk (train.jsonl a link to /dev/full): the first failed write is
 * said, naming the file, and the run stops at the end of the next step with a
 * checkpoint and a non-zero status, instead of training on without a log. */
static void full_log(void) {
    char d[512];
    snprintf(d, sizeof d, "%s/full", work);
    CHECK(sh(NULL, "mkdir -p %s && ln -s /dev/full %s/train.jsonl", d, d) == 0);
    char *out = NULL;
    int rc = sh(&out, "%s train %s --out %s --max-steps 50 --eval-every 0", hg, tiny, d);
    CHECK(rc == 1 && out && strstr(out, "full/train.jsonl: writing the log failed: No space left on device"));
    CHECK(out && strstr(out, "stopped at step 2: ") && strstr(out, "checkpoint saved"));
    if (rc != 1) fprintf(stderr, "full log: status %d, output: %s\n", rc, out ? out : "");
    free(out);
    CHECK(exists("%s/ckpt_00000002/model.safetensors", d) && !exists("%s/ckpt_00000050", d));
}

/* A config file sets most things; flags override it; run.json records the result. */
static void config_file(void) {
    char p[512], *out = NULL;
    snprintf(p, sizeof p, "%s/cfg.json", work);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"train\": \"%s/data/train_*.bin\", \"n-layer\": 1, \"n-head\": 2, \"d-model\": 32,\n"
               " \"ctx\": 16, \"batch\": 2, \"lr\": 0.002, \"lr-schedule\": \"constant\", \"max-steps\": 50,\n"
               " \"sequential\": true, \"threads\": 1, \"peak-gflops\": 100, \"keep-last\": 2, \"ckpt-every\": 2}\n", work);
    fclose(f);
    CHECK(sh(&out, "%s train --config %s --out %s/c --max-steps 6 --lr 0.001", hg, p, work) == 0);
    free(out);
    sh(&out, "cat %s/c/ckpt_00000006/run.json", work);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(j != NULL);
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(j, "lr"), *ms = cJSON_GetObjectItemCaseSensitive(j, "max-steps");
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(j, "ctx"), *sq = cJSON_GetObjectItemCaseSensitive(j, "sequential");
    CHECK(cJSON_IsNumber(lr) && lr->valuedouble == 0.001 && cJSON_IsNumber(ms) && ms->valuedouble == 6);
    CHECK(cJSON_IsNumber(ctx) && ctx->valuedouble == 16 && cJSON_IsTrue(sq));
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(j, "device"), *pr = cJSON_GetObjectItemCaseSensitive(j, "precision");
    CHECK(cJSON_IsString(dev) && !strcmp(dev->valuestring, "cpu") && cJSON_IsString(pr) && !strcmp(pr->valuestring, "fp32"));
    cJSON_Delete(j);
    free(out);
    sh(&out, "grep -c '\"lr\": 0.00100000005' %s/c/train.jsonl", work);
    CHECK(out && atoi(out) == 6); /* the flag's lr, constant */
    free(out);
    /* --keep-last 2 with a checkpoint every 2 steps */
    CHECK(!exists("%s/c/ckpt_00000002", work) && exists("%s/c/ckpt_00000004", work) && exists("%s/c/ckpt_00000006", work));
    /* the config's own errors name the file and key */
    f = fopen(p, "w");
    fprintf(f, "{\"lr\": \"fast\"}");
    fclose(f);
    CHECK(sh(&out, "%s train --config %s --out %s/c2", hg, p, work) == 2 && out && strstr(out, "cfg.json: key 'lr'"));
    free(out);
    f = fopen(p, "w");
    fprintf(f, "{\"lrr\": 1}");
    fclose(f);
    CHECK(sh(&out, "%s train --config %s --out %s/c2", hg, p, work) == 2 && out && strstr(out, "'lrr' is not a setting"));
    free(out);
    CHECK(!exists("%s/c2", work));
}

/* Two micro-batches of B=2 make the same step as one batch of B=4 (same windows, in
 * order), up to rounding in the sums. */
static void accumulation(void) {
    char d[512];
    series a, b;
    const char *common = "--sequential --n-layer 1 --n-head 2 --d-model 32 --ctx 16 --threads 1 --peak-gflops 100 "
                         "--max-steps 3 --eval-every 0";
    CHECK(sh(NULL, "%s train --train '%s/data/train_*.bin' %s --batch 4 --out %s/a4", hg, work, common, work) == 0);
    CHECK(sh(NULL, "%s train --train '%s/data/train_*.bin' %s --batch 2 --total-batch-tokens 64 --out %s/a2", hg, work,
             common, work) == 0);
    snprintf(d, sizeof d, "%s/a4", work);
    read_log(d, &a);
    snprintf(d, sizeof d, "%s/a2", work);
    read_log(d, &b);
    CHECK(a.n == 3 && b.n == 3);
    for (int i = 0; i < 3 && a.n == 3 && b.n == 3; i++) CHECK_CLOSE(b.loss[i], a.loss[i], 1e-5, 0);
    char *out = NULL;
    CHECK(sh(&out, "%s train --train '%s/data/train_*.bin' %s --batch 2 --total-batch-tokens 50 --out %s/a3", hg, work,
             common, work) == 1 && out && strstr(out, "--total-batch-tokens"));
    free(out);
}

static void samples(void) {
    char d[512], *out = NULL;
    series s;
    snprintf(d, sizeof d, "%s/smp", work);
    CHECK(sh(&out, "%s train %s --out %s --max-steps 4 --sample-every 2 --prompt 'the lord' --sample-tokens 12", hg, tiny,
             d) == 0);
    CHECK(out && strstr(out, "sample at step 4") && strstr(out, "the lord"));
    free(out);
    read_log(d, &s);
    CHECK(s.samples == 2);
}

/* Poisoned gradients: the step is skipped and the run goes on; K in a row stop it. An
 * exploding run (a huge learning rate) stops without ever writing a non-finite
 * checkpoint. */
static void nan_guard(void) {
    char d[512], *out = NULL;
    series s;
    snprintf(d, sizeof d, "%s/n1", work);
    CHECK(sh(&out, "%s train %s --out %s --max-steps 8 --ckpt-every 1 --keep-last 0 --inject-nan 3", hg, tiny, d) == 0);
    CHECK(out && strstr(out, "step 3: non-finite gradient norm, update skipped"));
    free(out);
    read_log(d, &s);
    CHECK(s.n == 8 && s.skipped == 1);
    for (int k = 1; k <= 8; k++) {
        char c[600];
        snprintf(c, sizeof c, "%s/ckpt_%08d", d, k);
        CHECK(finite_checkpoint(c));
    }
    snprintf(d, sizeof d, "%s/n2", work);
    CHECK(sh(&out, "%s train %s --out %s --max-steps 20 --ckpt-every 2 --keep-last 1 --inject-nan 5,6,7 --max-nan-steps 3",
             hg, tiny, d) == 1);
    char want[700];
    snprintf(want, sizeof want, "left its band at step 5. Newest checkpoint from before that: %s/ckpt_00000004", d);
    CHECK(out && strstr(out, "3 steps in a row") && strstr(out, want));
    free(out);
    /* step 6 was skipped: its parameters are step 4's, finite; step 4's checkpoint, from
     * before the excursion, was not pruned by --keep-last 1 */
    CHECK(exists("%s/ckpt_00000006", d) && exists("%s/ckpt_00000004", d) && !exists("%s/ckpt_00000002", d) &&
          !exists("%s/ckpt_00000008", d));
    CHECK(sh(NULL, "cmp %s/ckpt_00000004/model.safetensors %s/ckpt_00000006/model.safetensors", d, d) == 0);
    /* weight decay times lr far above 1 makes the weights overflow */
    snprintf(d, sizeof d, "%s/n3", work);
    int rc = sh(&out, "%s train %s --out %s --max-steps 30 --ckpt-every 1 --keep-last 0 --lr 1e6 --weight-decay 10 "
                "--grad-clip 0 --warmup-steps 0 --max-nan-steps 2", hg, tiny, d);
    snprintf(want, sizeof want, "Newest checkpoint from before that: %s/ckpt_00000001", d);
    CHECK(rc == 1 && out && strstr(out, "in a row") && strstr(out, "left its band at step 2") && strstr(out, want));
    free(out);
    int n = 0;
    for (int k = 1; k <= 30; k++) {
        char c[600];
        snprintf(c, sizeof c, "%s/ckpt_%08d", d, k);
        if (access(c, F_OK) != 0) continue;
        n++;
        CHECK(finite_checkpoint(c));
    }
    CHECK(n < 30);
    /* a loss that leaves its band and stays out (finite or not) stops the run after
     * --max-band-steps; with --skip-outliers those steps' updates are skipped */
    snprintf(d, sizeof d, "%s/n4", work);
    CHECK(sh(NULL, "%s train %s --out %s --max-steps 20 --lr-schedule constant", hg, tiny, d) == 0);
    rc = sh(&out, "%s train --resume --out %s --max-steps 60 --lr 1e6 --grad-clip 0 --max-nan-steps 1000 "
            "--max-band-steps 4 --skip-outliers", hg, d);
    snprintf(want, sizeof want, "Newest checkpoint from before that: %s/ckpt_00000020", d);
    CHECK(rc == 1 && out && strstr(out, "4 steps in a row had a loss out of its band") && strstr(out, "update skipped") &&
          strstr(out, want));
    if (rc != 1 || !out || !strstr(out, want)) fprintf(stderr, "band stop: status %d, output: %s\n", rc, out ? out : "");
    free(out);
}

/* --init-from-hf starts from a Hugging Face folder's weights: with lr 0 they stay as
 * they were, bit for bit. */
static void init_from_hf(void) {
    const char *hf = "fixtures/hf_tiny";
    char d[512], p[1024];
    CHECK(sh(NULL, "%s prepare --quiet --tokenizer %s --out %s/hfdata %s/corpus.txt", hg, hf, work, work) == 0);
    snprintf(d, sizeof d, "%s/hf", work);
    CHECK(sh(NULL, "%s train --init-from-hf %s --train '%s/hfdata/train_*.bin' --out %s --max-steps 1 --lr 0 --ctx 32 "
             "--batch 2 --threads 1 --peak-gflops 100", hg, hf, work, d) == 0);
    snprintf(p, sizeof p, "%s/ckpt_00000001/model.safetensors", d);
    hg_st_file *a = NULL, *b = NULL;
    CHECK_OK(hg_st_open(&a, p));
    snprintf(p, sizeof p, "%s/model.safetensors", hf);
    CHECK_OK(hg_st_open(&b, p));
    int same = a && b && hg_st_count(a) > 0;
    for (int i = 0; same && i < hg_st_count(a); i++) {
        const hg_st_tensor *t = hg_st_at(a, i), *u = hg_st_find(b, t->name);
        char prefixed[256];
        snprintf(prefixed, sizeof prefixed, "transformer.%s", t->name);
        if (!u) u = hg_st_find(b, prefixed);
        same = u && u->dtype == HG_ST_F32 && u->numel == t->numel && !memcmp(u->data, t->data, 4 * (size_t)t->numel);
        if (!same) fprintf(stderr, "init-from-hf: tensor %s differs\n", t->name);
    }
    CHECK(same);
    hg_st_close(a);
    hg_st_close(b);
}

/* A fine-tune of a Hugging Face folder (its tokenizer.json prepares the data, with
 * Llama 3's BOS as the document separator for the Llama folder, which has no
 * <|endoftext|>): N steps, stop, resume to 2N equals 2N in one go, bit for bit. The
 * checkpoint keeps the folder's tokenizer and generation_config.json, and exports as a
 * folder of the given class that loads back. */
static void fine_tune_hf(const char *name, const char *class_name) {
    char hf[128], d[512], common[512];
    snprintf(hf, sizeof hf, "fixtures/%s", name);
    series ref, res;
    CHECK(sh(NULL, "%s prepare --quiet --tokenizer %s --out %s/%s_data %s/corpus.txt", hg, hf, work, name, work) == 0);
    snprintf(common, sizeof common,
             "--train '%s/%s_data/train_*.bin' --ctx 32 --batch 2 --threads 1 --peak-gflops 100 --lr 1e-3 "
             "--warmup-steps 2 --lr-schedule constant --eval-every 0",
             work, name);
    CHECK(sh(NULL, "%s train --init-from-hf %s %s --out %s/%s_ref --max-steps 8", hg, hf, common, work, name) == 0);
    CHECK(sh(NULL, "%s train --init-from-hf %s %s --out %s/%s_res --max-steps 4", hg, hf, common, work, name) == 0);
    CHECK(sh(NULL, "%s train --resume --out %s/%s_res --max-steps 8", hg, work, name) == 0);
    /* killed before its first checkpoint, a fine-tune resumes from the same folder */
    char args[2048], log[600];
    snprintf(d, sizeof d, "%s/%s_early", work, name);
    snprintf(log, sizeof log, "%s/%s_early.log", work, name);
    snprintf(args, sizeof args, "exec %s train --init-from-hf %s %s --out %s --max-steps 100000", hg, hf, common, d);
    pid_t pid = spawn(args, log);
    wait_steps(d, 2);
    kill(pid, SIGKILL);
    wait_exit(pid);
    char *early = NULL;
    CHECK(sh(&early, "%s train --resume --out %s --max-steps 2", hg, d) == 0 && early &&
          strstr(early, "starting from step 0 with its run.json"));
    free(early);
    snprintf(d, sizeof d, "%s/%s_ref", work, name);
    read_log(d, &ref);
    snprintf(d, sizeof d, "%s/%s_res", work, name);
    read_log(d, &res);
    CHECK(same_losses(&ref, &res) && ref.loss[7] < ref.loss[0]);
    CHECK(exists("%s/%s_res/ckpt_00000008/tokenizer.json", work, name));
    CHECK(exists("%s/%s_res/ckpt_00000008/generation_config.json", work, name) ==
          exists("%s/generation_config.json", hf));
    char *out = NULL, want[128];
    CHECK(sh(&out, "%s export --model %s/%s_res --hf %s/%s_hf", hg, work, name, work, name) == 0);
    snprintf(want, sizeof want, "as %s in float32", class_name);
    CHECK(out && strstr(out, want));
    free(out);
    CHECK(exists("%s/%s_hf/tokenizer.json", work, name) && exists("%s/%s_hf/generation_config.json", work, name));
    CHECK(sh(NULL, "%s generate --model %s/%s_hf --prompt 'the lord' --max-new-tokens 4 --temperature 0", hg, work,
             name) == 0);
}

static uint8_t *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    if (b && fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static void spit(const char *p, const uint8_t *b, size_t n) {
    FILE *f = fopen(p, "wb");
    if (f) fwrite(b, 1, n, f), fclose(f);
}

/* hf_llama with the adapters of a PEFT folder (NULL: none), as a library user opens it. */
static hg_model *adapted_llama(const char *adapter) {
    hg_options o = hg_options_default();
    o.threads = 1, o.training = 0, o.batch = 2, o.seq_len = 16;
    hg_peft_config pc;
    if (adapter) {
        CHECK(hg_peft_config_load(adapter, &pc) == HG_OK);
        hg_config c;
        CHECK(hg_hf_config_load("fixtures/hf_llama/config.json", &c) == HG_OK);
        CHECK(hg_hf_lora_targets(&c, "LlamaForCausalLM", pc.targets, &pc.lora) == HG_OK);
        o.lora = pc.lora;
    }
    hg_model *m = NULL;
    CHECK(hg_model_load_hf(&m, "fixtures/hf_llama", &o) == HG_OK);
    if (m && adapter) CHECK(hg_peft_load(m, adapter) == HG_OK);
    return m;
}

/* Largest |a - b| over (2, 16) positions' logits of two models on the same tokens. */
static double logit_gap(hg_model *a, hg_model *b) {
    enum { B = 2, T = 16 };
    int32_t tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 37 + 11) % 400;
    const int V = hg_model_config(a)->vocab_size;
    float *la = malloc(sizeof(float) * B * T * V), *lb = malloc(sizeof(float) * B * T * V);
    double gap = -1;
    if (la && b && hg_forward(a, tok, NULL, B, T, NULL, la) == HG_OK && hg_forward(b, tok, NULL, B, T, NULL, lb) == HG_OK) {
        gap = 0;
        for (int i = 0; i < B * T * V; i++) gap = fmax(gap, fabs((double)la[i] - lb[i]));
    }
    free(la), free(lb);
    return gap;
}

/* Every tensor of a safetensors file has a name holding `part`. */
static int all_named(const char *path, const char *part) {
    hg_st_file *f;
    if (hg_st_open(&f, path) != HG_OK) return 0;
    int ok = hg_st_count(f) > 0;
    for (int i = 0; i < hg_st_count(f); i++) ok &= strstr(hg_st_at(f, i)->name, part) != NULL;
    hg_st_close(f);
    return ok;
}

/* LoRA on a Hugging Face folder (fine_tune_hf's hf_llama data): adapters with dropout
 * train (the loss falls), stop and resume bit for bit, and the checkpoint holds them as a
 * PEFT folder beside base.json, with the adapters' optimizer state only. export --peft
 * writes the same adapters; export --hf --merge a folder whose logits are the adapted
 * model's; generate reads the run as it reads the merged folder. A PEFT folder starts
 * a run (--adapter), a changed base refuses the resume, and --freeze keeps the tensors
 * it names as they were loaded. */
/* A bf16 run of 4 steps with `flags`, and the same with --base-precision bf16 stopped
 * after 2 and resumed (out/NAME): the same losses, bit for bit. */
static int held_base_matches(const char *common, const char *flags, const char *name) {
    char d[700];
    series ref, held;
    int ok = sh(NULL, "%s train %s %s --precision bf16 --out %s/%s_ref --max-steps 4", hg, common, flags, work, name) == 0 &&
             sh(NULL, "%s train %s %s --precision bf16 --base-precision bf16 --out %s/%s --max-steps 2", hg, common, flags,
                work, name) == 0 &&
             sh(NULL, "%s train --resume --out %s/%s --max-steps 4", hg, work, name) == 0;
    snprintf(d, sizeof d, "%s/%s_ref", work, name);
    read_log(d, &ref);
    snprintf(d, sizeof d, "%s/%s", work, name);
    read_log(d, &held);
    return ok && same_losses(&ref, &held) && held.n == 4;
}

static void lora_cli(void) {
    char common[1024], d[600], p[700];
    snprintf(common, sizeof common,
             "--init-from-hf fixtures/hf_llama --train '%s/hf_llama_data/train_*.bin' --ctx 32 --batch 2 --threads 1 "
             "--peak-gflops 100 --lr 1e-2 --warmup-steps 2 --lr-schedule constant --eval-every 0",
             work);
    const char *lora = "--lora r=4,alpha=8,dropout=0.1,targets=q_proj,v_proj,down_proj";
    series ref, res;
    char *out = NULL;
    CHECK(sh(&out, "%s train %s %s --out %s/lora_ref --max-steps 12", hg, common, lora, work) == 0 && out &&
          strstr(out, "trained, ") && strstr(out, "LoRA adapters"));
    free(out);
    CHECK(sh(NULL, "%s train %s %s --out %s/lora_res --max-steps 6", hg, common, lora, work) == 0);
    CHECK(sh(NULL, "%s train --resume --out %s/lora_res --max-steps 12", hg, work) == 0);
    snprintf(d, sizeof d, "%s/lora_ref", work);
    read_log(d, &ref);
    snprintf(d, sizeof d, "%s/lora_res", work);
    read_log(d, &res);
    CHECK(same_losses(&ref, &res) && ref.n == 12 && ref.loss[11] < ref.loss[0] - 0.5);
    snprintf(d, sizeof d, "%s/lora_res/ckpt_00000012", work);
    CHECK(sh(NULL, "cmp %s/adapter/adapter_model.safetensors %s/lora_ref/ckpt_00000012/adapter/adapter_model.safetensors",
             d, work) == 0);
    CHECK(sh(NULL, "cmp %s/optimizer.safetensors %s/lora_ref/ckpt_00000012/optimizer.safetensors", d, work) == 0);
    CHECK(exists("%s/base.json", d) && exists("%s/adapter/adapter_config.json", d) && exists("%s/tokenizer.json", d));
    CHECK(!exists("%s/model.safetensors", d));
    snprintf(p, sizeof p, "%s/optimizer.safetensors", d);
    CHECK(all_named(p, ".lora_"));

    /* the base held in bf16 trains as a bf16 run with fp32 masters of it does, and resumes:
     * adapters, and frozen tensors without (a checkpoint holding held tensors) */
    CHECK(held_base_matches(common, lora, "lora_bf"));
    CHECK(sh(NULL, "%s export --model %s/lora_bf --hf %s/lora_bf_hf --merge", hg, work, work) == 0);
    CHECK(held_base_matches(common, "--freeze 'h.*.mlp.*,lm_head.weight'", "freeze_bf"));
    CHECK(sh(&out, "%s train %s %s --base-precision bf16 --out %s/lora_bf32 --max-steps 1", hg, common, lora, work) == 1 &&
          out && strstr(out, "--base-precision bf16") && strstr(out, "precision bf16"));
    free(out);

    /* export: the adapters alone, then merged into the weights */
    snprintf(d, sizeof d, "%s/lora_res/ckpt_00000012", work);
    CHECK(sh(NULL, "%s export --model %s/lora_res --peft %s/lora_peft", hg, work, work) == 0);
    CHECK(sh(NULL, "cmp %s/adapter/adapter_model.safetensors %s/lora_peft/adapter_model.safetensors", d, work) == 0);
    CHECK(sh(&out, "%s export --model %s/lora_res --hf %s/lora_hf", hg, work, work) == 2 && out &&
          strstr(out, "--merge"));
    free(out);
    CHECK(!exists("%s/lora_hf", work));
    CHECK(sh(NULL, "%s export --model %s/lora_res --hf %s/lora_hf --merge", hg, work, work) == 0);
    snprintf(p, sizeof p, "%s/lora_peft", work);
    hg_model *base = adapted_llama(NULL), *lora_m = adapted_llama(p), *merged = NULL;
    snprintf(p, sizeof p, "%s/lora_hf", work);
    hg_options o = hg_options_default();
    o.threads = 1, o.training = 0, o.batch = 2, o.seq_len = 16;
    CHECK(hg_model_load_hf(&merged, p, &o) == HG_OK);
    double moved = logit_gap(base, lora_m), merge_gap = logit_gap(merged, lora_m);
    if (!(moved > 1e-2 && merge_gap >= 0 && merge_gap < 1e-4 * moved))
        fprintf(stderr, "LoRA: logits moved %.3g by the adapters; merged against adapted %.3g\n", moved, merge_gap),
            check_failures++;
    hg_model_free(base), hg_model_free(lora_m), hg_model_free(merged);
    char *g1 = NULL, *g2 = NULL;
    CHECK(sh(&g1, "%s generate --model %s/lora_res --prompt 'the lord' --max-new-tokens 8 --temperature 0 2>/dev/null",
             hg, work) == 0);
    CHECK(sh(&g2, "%s generate --model %s/lora_hf --prompt 'the lord' --max-new-tokens 8 --temperature 0 2>/dev/null",
             hg, work) == 0);
    CHECK(g1 && g2 && !strcmp(g1, g2));
    free(g1), free(g2);
    CHECK(sh(&g1, "%s generate --model fixtures/hf_llama --adapter %s/lora_peft --prompt 'the lord' --max-new-tokens 8 "
             "--temperature 0 2>/dev/null", hg, work) == 0);
    CHECK(sh(&g2, "%s generate --model %s/lora_res --prompt 'the lord' --max-new-tokens 8 --temperature 0 2>/dev/null",
             hg, work) == 0);
    CHECK(g1 && g2 && !strcmp(g1, g2));
    free(g1), free(g2);

    /* a PEFT folder's adapters start a run: at lr 0 they come out as they went in */
    CHECK(sh(NULL, "%s train %s --adapter fixtures/peft_llama --lr 0 --out %s/lora_in --max-steps 1", hg, common, work) == 0);
    hg_st_file *a = NULL, *b = NULL;
    snprintf(p, sizeof p, "%s/lora_in/ckpt_00000001/adapter/adapter_model.safetensors", work);
    CHECK(hg_st_open(&a, p) == HG_OK && hg_st_open(&b, "fixtures/peft_llama/adapter_model.safetensors") == HG_OK);
    int same = a && b && hg_st_count(a) == hg_st_count(b) && hg_st_count(a) > 0;
    for (int i = 0; same && i < hg_st_count(b); i++) {
        const hg_st_tensor *x = hg_st_at(b, i), *y = hg_st_find(a, x->name);
        float vx, vy;
        for (int64_t k = 0; y && k < x->numel && same; k++)
            hg_st_convert_f32(x, k, 1, &vx), hg_st_convert_f32(y, k, 1, &vy), same = vx == vy;
        same &= y && y->numel == x->numel;
    }
    CHECK(same);
    hg_st_close(a), hg_st_close(b);

    /* the base changed under a run: its resume, export and generate are refused by name */
    CHECK(sh(NULL, "cp -r fixtures/hf_llama %s/base_copy", work) == 0);
    CHECK(sh(NULL, "%s train --init-from-hf %s/base_copy %s %s --out %s/lora_moved --max-steps 2", hg, work,
             strstr(common, " --train"), lora, work) == 0);
    snprintf(p, sizeof p, "%s/base_copy/model-00003-of-00003.safetensors", work);
    size_t n = 0;
    uint8_t *w = slurp(p, &n);
    CHECK(w && n > 4096);
    if (w && n > 4096) w[n - 4] ^= 0x01, spit(p, w, n); /* the lowest mantissa bit of a weight */
    free(w);
    CHECK(sh(&out, "%s train --resume --out %s/lora_moved --max-steps 4", hg, work) == 1 && out &&
          strstr(out, "base.json") && strstr(out, "other weights"));
    free(out);
    CHECK(sh(&out, "%s generate --model %s/lora_moved --prompt 'the' --max-new-tokens 2", hg, work) == 1 && out &&
          strstr(out, "other weights"));
    free(out);
    CHECK(!exists("%s/lora_moved/ckpt_00000004", work));

    /* --freeze: the tensors it names come out of training as they went in, the others move,
     * and a frozen run resumes bit for bit */
    snprintf(common, sizeof common,
             "--init-from-hf fixtures/hf_llama --train '%s/hf_llama_data/train_*.bin' --ctx 32 --batch 2 --threads 1 "
             "--peak-gflops 100 --lr 1e-3 --warmup-steps 2 --lr-schedule constant --eval-every 0 "
             "--freeze 'model.embed_tokens.weight,model.layers.0.*'", work);
    CHECK(sh(NULL, "%s train %s --out %s/frz_ref --max-steps 6", hg, common, work) == 0);
    CHECK(sh(NULL, "%s train %s --out %s/frz_res --max-steps 3", hg, common, work) == 0);
    CHECK(sh(NULL, "%s train --resume --out %s/frz_res --max-steps 6", hg, work) == 0);
    CHECK(sh(NULL, "cmp %s/frz_ref/ckpt_00000006/model.safetensors %s/frz_res/ckpt_00000006/model.safetensors", work,
             work) == 0);
    hg_model *before = adapted_llama(NULL), *after = NULL;
    snprintf(p, sizeof p, "%s/frz_ref/ckpt_00000006/model.safetensors", work);
    hg_config c;
    CHECK(hg_checkpoint_config(p, &c) == HG_OK && hg_model_create(&after, &c, &o) == HG_OK && hg_model_load(after, p) == HG_OK);
    int kept = 0, moved_n = 0, wrong = 0;
    for (int i = 0; before && after && i < hg_param_count(before); i++) {
        hg_param_info x, y;
        CHECK(hg_param_at(before, i, &x) == HG_OK && hg_param_at(after, i, &y) == HG_OK);
        const int frozen = !strcmp(x.name, "wte.weight") || !strncmp(x.name, "h.0.", 4);
        const int equal = !memcmp(x.data, y.data, sizeof(float) * (size_t)x.numel);
        kept += frozen && equal, moved_n += !frozen && !equal, wrong += frozen != equal;
        if (frozen != equal) fprintf(stderr, "--freeze: %s %s\n", x.name, frozen ? "moved" : "did not move");
    }
    CHECK(kept >= 2 && moved_n >= 2 && !wrong);
    hg_model_free(before), hg_model_free(after);
    snprintf(p, sizeof p, "%s/frz_ref/ckpt_00000006/optimizer.safetensors", work);
    hg_st_file *f = NULL;
    CHECK(hg_st_open(&f, p) == HG_OK);
    for (int i = 0; f && i < hg_st_count(f); i++)
        CHECK(strcmp(hg_st_at(f, i)->name + 2, "wte.weight") && strncmp(hg_st_at(f, i)->name + 2, "h.0.", 4));
    hg_st_close(f);
}

/* The command fails with status 1 or 2, its output is one line holding `needle`, and
 * the run folder was not created. */
static void bad(const char *needle, const char *args) {
    char *out = NULL;
    int rc = sh(&out, "%s train %s --out %s/bad", hg, args, work);
    int lines = 0;
    for (const char *p = out; p && *p; p++) lines += *p == '\n';
    if (!(rc == 1 || rc == 2) || !out || !strstr(out, needle) || lines != 1 || exists("%s/bad", work)) {
        fprintf(stderr, "train %s\n  -> status %d, output '%s', want one line naming '%s'%s\n", args, rc,
                out ? out : "", needle, exists("%s/bad", work) ? " and no run folder" : "");
        check_failures++;
    }
    free(out);
    sh(NULL, "rm -rf %s/bad", work);
}

/* Replaces the first `from` in the JSON header with `to` (same length). */
static int patch(uint8_t *b, size_t n, const char *from, const char *to) {
    size_t k = strlen(from);
    for (size_t i = 8; i + k <= n; i++)
        if (!memcmp(b + i, from, k)) return memcpy(b + i, to, k), 1;
    return 0;
}

/* bad() with the tiny model's flags, --max-steps 2 and the flags fmt formats. */
static void __attribute__((format(printf, 2, 3))) bad_tiny(const char *needle, const char *fmt, ...) {
    char extra[2048], args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(extra, sizeof extra, fmt, ap);
    va_end(ap);
    snprintf(args, sizeof args, "%s --max-steps 2 %s", tiny, extra);
    bad(needle, args);
}

static void bad_input(void) {
    char args[4096], p[1024];
    bad("unknown option '--lrr'", "--lrr 3");
    bad("--lr: 'abc' is not a number", "--lr abc");
    bad("--batch: '0' is not an integer", "--batch 0");
    bad("--lr-schedule: 'steep'", "--lr-schedule steep");
    bad("needs a value", "--max-steps");
    bad("unexpected argument 'extra'", "extra");
    /* a config with a NUL byte, or text after its object, is not read in part */
    snprintf(p, sizeof p, "%s/nul.json", work);
    spit(p, (const uint8_t *)"{\"lr\": 0.1}\0{}", 14);
    snprintf(args, sizeof args, "--config %s", p);
    bad("nul.json: byte 11 is a NUL byte", args);
    snprintf(p, sizeof p, "%s/two.json", work);
    spit(p, (const uint8_t *)"{\"lr\": 0.1} {\"lr\": 9}\n", 22);
    snprintf(args, sizeof args, "--config %s", p);
    bad("two.json: text after the JSON object at byte 12", args);
    snprintf(args, sizeof args, "%s", tiny);
    bad("give --max-steps N or --max-tokens N", args);
    bad_tiny("both --max-steps and --max-tokens", "--max-tokens 100");
    bad_tiny("--ctx 32 exceeds the model's max_seq_len 16", "--max-seq-len 16");
    bad_tiny("n_head (3) must divide d_model (32)", "--n-head 3");
    bad("--train 'nope/*.bin': no file matches", "--train 'nope/*.bin' --model tiny --vocab-size 512 --max-steps 1");
    /* a preset's max_seq_len widens to a longer --ctx, as --help says */
    CHECK(sh(NULL, "%s train --train '%s/data/train_*.bin' --model tiny --ctx 128 --batch 1 --threads 1 "
             "--peak-gflops 100 --max-steps 1 --out %s/ctx128", hg, work, work) == 0);
    char w128[600];
    hg_config c128 = {0};
    snprintf(w128, sizeof w128, "%s/ctx128/ckpt_00000001/model.safetensors", work);
    CHECK(hg_checkpoint_config(w128, &c128) == HG_OK && c128.max_seq_len == 128);
    /* a glob that matches nothing is named first, not the vocabulary it would have given */
    bad("--train 'nope/*.bin': no file matches", "--train 'nope/*.bin' --model tiny --max-steps 1");
    bad_tiny("has 320 ids but the model has vocab_size 256", "--vocab-size 256");
    /* more embedding rows than the tokenizer has ids (a padded vocabulary) is fine */
    CHECK(sh(NULL, "%s train %s --max-steps 1 --vocab-size 384 --out %s/padded", hg, tiny, work) == 0);
    /* a tokenizer of another vocabulary than the shards and model */
    CHECK(sh(NULL, "%s tokenizer train --vocab-size 300 --out %s/tok300 %s/corpus.txt", hg, work, work) == 0);
    bad_tiny("train_000000.bin was written for a vocabulary of 320 ids, but the tokenizer has 300",
             "--tokenizer %s/tok300", work);
    /* checkpoints: another shape, and corrupt files */
    char ck[600];
    snprintf(ck, sizeof ck, "%s/d1/ckpt_00000012", work);
    bad_tiny("--d-model 64 differs from", "--init-from %s --d-model 64", ck);
    bad_tiny("--init-from: ", "--init-from %s/nope", work);
    snprintf(p, sizeof p, "%s/model.safetensors", ck);
    size_t n;
    uint8_t *orig = slurp(p, &n), *b = malloc(n);
    if (!orig || !b) return;
    uint64_t hlen;
    memcpy(&hlen, orig, 8);
    struct { const char *what, *needle; } cases[] = {
        {"truncated", "lie outside"}, {"header", "header length"}, {"dtype", "dtype I32"}, {"overlap", "overlap"}};
    for (int c = 0; c < 4; c++) {
        memcpy(b, orig, n);
        size_t len = n;
        if (c == 0) len = n - 64;
        if (c == 1) memcpy(b, &(uint64_t){n}, 8);
        if (c == 2 && !patch(b, 8 + hlen, "\"F32\"", "\"I32\"")) check_failures++;
        if (c == 3) { /* the second tensor starts 4 bytes inside the first */
            char from[32], to[32];
            int e0 = 320 * 32 * 4;
            snprintf(from, sizeof from, "[%d,", e0);
            snprintf(to, sizeof to, "[%0*d,", (int)strlen(from) - 2, e0 - 4);
            if (!patch(b, 8 + hlen, from, to)) check_failures++;
        }
        snprintf(p, sizeof p, "%s/%s.safetensors", work, cases[c].what);
        spit(p, b, len);
        snprintf(args, sizeof args, "%s --max-steps 2 --init-from %s", tiny, p);
        char needle[700];
        snprintf(needle, sizeof needle, "%s.safetensors", cases[c].what);
        bad(needle, args);
        bad(cases[c].needle, args);
    }
    free(orig);
    free(b);
    /* an output folder that cannot be written */
    snprintf(p, sizeof p, "%s/afile", work);
    spit(p, (const uint8_t *)"x", 1);
    char *out = NULL;
    CHECK(sh(&out, "%s train %s --max-steps 2 --out %s/afile/run", hg, tiny, work) == 1 && out &&
          strstr(out, "--out") && strstr(out, "is not a folder"));
    free(out);
    if (geteuid() != 0) { /* root writes anywhere */
        CHECK(sh(NULL, "mkdir %s/ro && chmod 555 %s/ro", work, work) == 0);
        CHECK(sh(&out, "%s train %s --max-steps 2 --out %s/ro/run", hg, tiny, work) == 1 && out && strstr(out, "not writable"));
        free(out);
    }
    /* an --out whose checkpoint files would pass PATH_MAX is refused at start */
    char *deep = malloc(5000);
    if (deep) {
        int k = snprintf(deep, 5000, "%s", work);
        while (k < 4000) k += snprintf(deep + k, 5000 - (size_t)k, "/%0200d", 0);
        CHECK(sh(&out, "%s train %s --max-steps 2 --out %s", hg, tiny, deep) == 1 && out && strstr(out, "--out: the path is") &&
              strstr(out, "limit"));
        free(out);
        free(deep);
    }
    /* devices: a CUDA module that cannot load anywhere, and this machine's GPU unless it
     * has one; bf16 on the CPU; what CUDA models cannot do yet */
    snprintf(args, sizeof args, "%s --max-steps 2 --device cuda", tiny);
    setenv("HANDGRAD_CUDA_MODULE", "/nonexistent/libhandgrad_cuda.so", 1);
    bad("--device cuda: ", args);
    unsetenv("HANDGRAD_CUDA_MODULE");
    if (sh(NULL, "nvidia-smi -L") != 0) bad("--device cuda: ", args);
    bad_tiny("--zero 1: ZeRO-1 is not wired for CUDA models yet", "--device cuda --zero 1");
    bad_tiny("--device: 'gpu' is not cpu or cuda", "--device gpu");
    /* a resume on a device that cannot run is refused the same way and changes nothing:
     * the next resume goes on on the CPU, as run.json says */
    setenv("HANDGRAD_CUDA_MODULE", "/nonexistent/libhandgrad_cuda.so", 1);
    int rc = sh(&out, "%s train --resume --out %s/r_res --max-steps 22 --device cuda", hg, work);
    unsetenv("HANDGRAD_CUDA_MODULE");
    CHECK(rc == 1 && out && strstr(out, "--device cuda: ") && strchr(out, '\n') == out + strlen(out) - 1);
    free(out);
    CHECK(!exists("%s/r_res/ckpt_00000022", work));
    CHECK(sh(&out, "%s train --resume --out %s/r_res --max-steps 22", hg, work) == 0 && out &&
          strstr(out, "resuming at step 20") && strstr(out, "1 thread") && !strstr(out, "bf16"));
    free(out);
    CHECK(exists("%s/r_res/ckpt_00000022/model.safetensors", work));
    /* the checkpoints are the same files in both precisions (fp32 masters): an fp32 run
     * goes on in bf16, which run.json then keeps, and back in fp32 */
    CHECK(sh(&out, "%s train --resume --out %s/r_res --max-steps 24 --precision bf16", hg, work) == 0 && out &&
          strstr(out, "resuming at step 22") && strstr(out, "1 thread, bf16"));
    free(out);
    CHECK(sh(&out, "%s train --resume --out %s/r_res --max-steps 26", hg, work) == 0 && out &&
          strstr(out, "resuming at step 24") && strstr(out, "1 thread, bf16"));
    free(out);
    CHECK(sh(&out, "%s train --resume --out %s/r_res --max-steps 28 --precision fp32", hg, work) == 0 && out &&
          strstr(out, "resuming at step 26") && !strstr(out, "bf16"));
    free(out);
    CHECK(exists("%s/r_res/ckpt_00000028/model.safetensors", work));
    /* an existing run is not overwritten without --resume */
    CHECK(sh(&out, "%s train %s --max-steps 2 --out %s/d1", hg, tiny, work) == 1 && out && strstr(out, "--resume"));
    free(out);
}

/* Chat data end to end: prepare --chat with Llama 3.1's template on hf_llama's tokenizer,
 * then train reads a record a row (the default for shards with a loss mask) and the loss
 * falls. The step's loss is the mean over its targets however the step is cut: B = 2
 * in one micro-batch and B = 1 twice accumulated give the same losses (to rounding),
 * which a mean of micro-batch means would not, the records having different counts of
 * trained tokens. */
/* work/name: hf_llama's tokenizer.json and a tokenizer_config.json with the template
 * (a JSON string written by the test, no Python) and the bos and eos tokens. */
static int chat_tokenizer(const char *name, const char *jinja, const char *bos, const char *eos) {
    char d[700], path[800], src[300];
    snprintf(d, sizeof d, "%s/%s", work, name);
    CHECK(sh(NULL, "mkdir -p %s && cp fixtures/hf_llama/tokenizer.json %s/", d, d) == 0);
    snprintf(src, sizeof src, "fixtures/chat_templates/%s", jinja);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", d);
    FILE *t = fopen(src, "rb"), *c = fopen(path, "wb");
    CHECK(t && c);
    if (!t || !c) return 0;
    fprintf(c, "{\"bos_token\": \"%s\", \"eos_token\": \"%s\", \"chat_template\": \"", bos, eos);
    for (int ch; (ch = fgetc(t)) != EOF;) {
        if (ch == '"' || ch == '\\') fputc('\\', c), fputc(ch, c);
        else if (ch == '\n') fputs("\\n", c);
        else fputc(ch, c);
    }
    fputs("\"}\n", c);
    fclose(t), fclose(c);
    return 1;
}

static void chat_cli(void) {
    char d[700], path[800];
    if (!chat_tokenizer("chat_tok", "llama3.1.jinja", "<|begin_of_text|>", "<|eot_id|>")) return;
    snprintf(d, sizeof d, "%s/chat_tok", work);
    snprintf(path, sizeof path, "%s/chat.jsonl", work);
    FILE *c = fopen(path, "wb");
    CHECK(c != NULL);
    if (!c) return;
    for (int i = 0; i < 48; i++) /* records of different lengths */
        fprintf(c, "{\"messages\": [{\"role\": \"user\", \"content\": \"Say verse %d.\"}, {\"role\": \"assistant\", "
                "\"content\": \"%s\"}]}\n", i, i % 3 == 0 ? "In the beginning God created the heaven and the earth."
                : i % 3 == 1 ? "And God said, Let there be light." : "Amen.");
    fclose(c);
    char *out = NULL;
    CHECK(sh(&out, "%s prepare --chat --tokenizer %s --out %s/chat_data --val-fraction 0.1 --quiet %s", hg, d, work, path) == 0 &&
          out && strstr(out, "48 records") && strstr(out, " 0 record(s) left out"));
    free(out);
    CHECK(exists("%s/chat_data/train_000000.bin", work) && exists("%s/chat_data/val_000000.bin", work));
    char common[1400];
    snprintf(common, sizeof common,
             "--init-from-hf fixtures/hf_llama --train '%s/chat_data/train_*.bin' --val '%s/chat_data/val_*.bin' --ctx 96 "
             "--threads 1 --lr 3e-3 --warmup-steps 1 --lr-schedule constant --sequential --eval-every 4 --eval-batches 2 "
             "--peak-gflops 100", work, work);
    CHECK(sh(&out, "%s train %s --batch 2 --max-steps 8 --out %s/chat_b2", hg, common, work) == 0 && out &&
          strstr(out, "packed rows"));
    free(out);
    CHECK(sh(NULL, "%s train %s --batch 1 --total-batch-tokens 192 --max-steps 8 --out %s/chat_acc", hg, common, work) == 0);
    series a, b;
    snprintf(d, sizeof d, "%s/chat_b2", work);
    read_log(d, &a);
    snprintf(d, sizeof d, "%s/chat_acc", work);
    read_log(d, &b);
    int close = a.n == 8 && b.n == 8;
    for (int i = 0; close && i < a.n; i++) close = fabs(a.loss[i] - b.loss[i]) <= 2e-5 * fabs(a.loss[i]);
    if (!close && a.n && b.n) fprintf(stderr, "chat: step 1 losses %.7f (B=2) and %.7f (B=1, accumulated)\n", a.loss[0], b.loss[0]);
    CHECK(close && a.loss[7] < a.loss[0]);
    /* --no-split: a record longer than a row is refused by name */
    CHECK(sh(&out, "%s train %s --batch 2 --ctx 8 --no-split --max-steps 1 --out %s/chat_nosplit", hg, common, work) != 0 &&
          out && strstr(out, "no_split"));
    free(out);
    CHECK(sh(&out, "%s train %s --pack --rows padded --max-steps 1 --out %s/chat_both", hg, common, work) != 0 && out &&
          strstr(out, "--pack"));
    free(out);

    /* Packing computes each record as it computes alone: the same record 24 times (55
     * tokens under Phi-3.5's template), a step of one packed row of 128 (two copies) has
     * the loss of a step of one padded row (one copy); windows across the records, which
     * attend to each other, do not */
    if (!chat_tokenizer("phi_tok", "phi3.5.jinja", "<s>", "<|endoftext|>")) return;
    snprintf(path, sizeof path, "%s/same.jsonl", work);
    c = fopen(path, "wb");
    CHECK(c != NULL);
    if (!c) return;
    for (int i = 0; i < 24; i++)
        fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"Say it.\"}, {\"role\": \"assistant\", "
              "\"content\": \"Amen.\"}]}\n", c);
    fclose(c);
    CHECK(sh(NULL, "%s prepare --chat --tokenizer %s/phi_tok --out %s/same_data --val-fraction 0.1 --quiet %s", hg, work,
             work, path) == 0);
    snprintf(common, sizeof common,
             "--init-from-hf fixtures/hf_llama --train '%s/same_data/train_*.bin' --ctx 128 --threads 1 --sequential "
             "--batch 1 --max-steps 1 --peak-gflops 100", work);
    CHECK(sh(&out, "%s train %s --rows packed --out %s/same_packed", hg, common, work) == 0 && out &&
          strstr(out, "packed rows") && strstr(out, "11 of them"));
    free(out);
    CHECK(sh(NULL, "%s train %s --rows padded --out %s/same_padded", hg, common, work) == 0);
    CHECK(sh(NULL, "%s train %s --rows windows --out %s/same_windows", hg, common, work) == 0);
    series w;
    snprintf(d, sizeof d, "%s/same_packed", work);
    read_log(d, &a);
    snprintf(d, sizeof d, "%s/same_padded", work);
    read_log(d, &b);
    snprintf(d, sizeof d, "%s/same_windows", work);
    read_log(d, &w);
    CHECK(a.n == 1 && b.n == 1 && w.n == 1 && fabs(a.loss[0] - b.loss[0]) <= 1e-5 * fabs(b.loss[0]) &&
          fabs(w.loss[0] - b.loss[0]) > 1e-3 * fabs(b.loss[0]));
    if (a.n && b.n && w.n)
        printf("chat: a record alone %.7f, packed with a copy %.7f, in windows across copies %.7f\n", b.loss[0],
               a.loss[0], w.loss[0]);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_train_cli PATH/handgrad\n");
        return 2;
    }
    hg = argv[1];
    snprintf(work, sizeof work, "/tmp/hg_test_train.XXXXXX");
    if (!mkdtemp(work)) return 1;
    char *out = NULL;
    CHECK(sh(&out, "%s train --help", hg) == 0);
    static const char *flags[] = {"--model", "--n-layer", "--init-from ", "--init-from-hf", "--train", "--val", "--batch",
                                  "--ctx", "--total-batch-tokens", "--lr", "--min-lr", "--warmup-steps", "--lr-schedule",
                                  "--weight-decay", "--grad-clip", "--dropout", "--max-steps", "--max-tokens", "--seed",
                                  "--threads", "--eval-every", "--eval-batches", "--sample-every", "--prompt",
                                  "--ckpt-every", "--keep-last", "--out", "--resume", "--config", "--sequential",
                                  "--device cpu|cuda", "--precision fp32|bf16", "--deterministic", "--cuda-graphs"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!out || !strstr(out, flags[i])) fprintf(stderr, "--help lacks %s\n", flags[i]), check_failures++;
    free(out);
    make_data();
    deterministic();
    resume_exact();
    optim_state_bf16();
    band_resume_exact();
    fine_tune_hf("hf_qwen2", "Qwen2ForCausalLM");
    fine_tune_hf("hf_llama", "LlamaForCausalLM");
    lora_cli(); /* on hf_llama's data */
    chat_cli();
    fine_tune_hf("hf_gemma2", "Gemma2ForCausalLM"); /* the sandwich block and both caps */
    fine_tune_hf("hf_phi", "PhiForCausalLM");       /* the parallel block and lm_head's bias */
    sigint_then_resume();
    two_writers();
    resume_guards();
    failed_write();
    full_log();
    config_file();
    accumulation();
    samples();
    nan_guard();
    init_from_hf();
    bad_input();
    if (!check_failures) sh(NULL, "rm -rf %s", work);
    else fprintf(stderr, "test_train_cli: files kept in %s\n", work);
    CHECK_DONE();
}
