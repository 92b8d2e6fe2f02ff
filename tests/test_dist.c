/* Data-parallel training against one process. Two modes:
 *
 *   test_dist run [flags]          one training run, under mpirun or alone (the worker)
 *   test_dist MPIEXEC [FLAGS...]   the test: launches workers and compares their output
 *
 * The worker trains the tiny preset (dropout off, fixed seed) on a synthetic global
 * batch of B sequences per step; rank r of N takes sequences [r*B/N, (r+1)*B/N), in
 * `accum` micro-steps. Rank 0 writes one line per step (mean loss and gradient norm, as
 * hex floats) and, with --save, a checkpoint: every parameter with its whole AdamW m and
 * v (gathered from the ZeRO-1 slices), the step count and the RNG counter. --load
 * resumes from such a file on any number of ranks.
 *
 * The test checks, against 1 rank x B:
 *  - 2 ranks x B/2, with and without ZeRO-1 and with gradient accumulation, follow the
 *    same loss and gradient-norm trajectory within fp32 reduction-order tolerance;
 *  - a checkpoint saved on 1 rank resumes on 2, and one saved on 2 resumes on 1;
 *  - resuming on the same rank count is bit-exact (same losses, same checkpoint bytes);
 *  - mismatched configs and a batch that the ranks do not divide fail on every rank;
 *  - a rank that hangs or dies stops the others within a bounded time. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/timer.h"
#include "handgrad.h"
#include "model/gpt.h" /* adam_t, restored on resume */

enum { T = 32, MAX_STEPS = 16 };

/* ------------------------------------------------------------ the worker */

typedef struct run_args {
    int zero, steps, start, batch, accum, stall_rank, stall_step, die_rank, die_step;
    size_t bucket;
    double timeout;
    uint64_t seed;
    const char *out, *save, *load;
} run_args;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Sequence g of step s: an arithmetic progression mod V, learnable, never all equal. */
static void sequence(int s, int g, int V, int32_t *x, int32_t *y) {
    uint64_t h = mix((uint64_t)s * 1000003u + (uint64_t)g);
    int a = (int)(h % (uint64_t)V), b = 1 + (int)((h >> 20) % 7);
    for (int t = 0; t < T; t++) x[t] = (a + b * t) % V, y[t] = (a + b * (t + 1)) % V;
}

static int fail_run(int rank, const char *what) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, hg_last_error());
    return 3;
}

static int save_ckpt(hg_dist *d, hg_model *m, int rank, const char *path) {
    FILE *f = rank == 0 ? fopen(path, "wb") : NULL;
    if (rank == 0 && !f) return fprintf(stderr, "cannot write %s\n", path), 3;
    int64_t head[2] = {hg_optimizer_steps(m), (int64_t)hg_model_rng_counter(m)};
    if (f) fwrite(head, sizeof head, 1, f);
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        hg_param_at(m, i, &p);
        float *mv = rank == 0 ? malloc(2 * sizeof(float) * (size_t)p.numel) : NULL;
        if (hg_dist_optimizer_get(d, i, 0, mv, mv ? mv + p.numel : NULL) != HG_OK) return fail_run(rank, "save");
        if (f) fwrite(p.data, sizeof(float), (size_t)p.numel, f), fwrite(mv, sizeof(float), 2 * (size_t)p.numel, f);
        free(mv);
    }
    if (f) fclose(f);
    return 0;
}

static int load_ckpt(hg_dist *d, hg_model *m, const char *path) {
    FILE *f = fopen(path, "rb");
    int64_t head[2];
    if (!f || fread(head, sizeof head, 1, f) != 1) return fprintf(stderr, "cannot read %s\n", path), 3;
    m->adam_t = head[0];
    hg_model_set_rng_counter(m, (uint64_t)head[1]);
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        hg_param_at(m, i, &p);
        float *mv = malloc(2 * sizeof(float) * (size_t)p.numel);
        if (fread(p.data, sizeof(float), (size_t)p.numel, f) != (size_t)p.numel ||
            fread(mv, sizeof(float), 2 * (size_t)p.numel, f) != 2 * (size_t)p.numel)
            return fprintf(stderr, "%s is truncated\n", path), 3;
        hg_dist_optimizer_set(d, i, mv, mv + p.numel);
        free(mv);
    }
    fclose(f);
    return 0;
}

/* Every rank's parameters hash the same. */
static int params_agree(hg_dist *d, hg_model *m, int N) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        hg_param_at(m, i, &p);
        const unsigned char *b = (const unsigned char *)p.data;
        for (size_t k = 0; k < sizeof(float) * (size_t)p.numel; k++) h = (h ^ b[k]) * 0x100000001b3ull;
    }
    double mine[2] = {(double)(h >> 32), (double)(h & 0xffffffffu)}, sum[2] = {mine[0], mine[1]};
    if (hg_dist_sum(d, sum, 2) != HG_OK) return 0;
    return sum[0] == N * mine[0] && sum[1] == N * mine[1];
}

static int worker(const run_args *a) {
    hg_comm *comm;
    if (hg_comm_open(&comm, HG_COMM_AUTO) != HG_OK) return fail_run(0, "hg_comm_open");
    int N = hg_comm_size(comm), r = hg_comm_rank(comm), rc = 0;
    hg_config cfg;
    hg_config_preset("tiny", &cfg);
    cfg.dropout = 0.0f;
    hg_dist_options dopt = hg_dist_options_default();
    dopt.zero = a->zero, dopt.global_batch = a->batch, dopt.bucket_bytes = a->bucket, dopt.timeout_s = a->timeout;
    int Bl = a->batch / N > 0 ? a->batch / N : 1, Bm = Bl / a->accum > 0 ? Bl / a->accum : 1;
    hg_options opt = hg_options_default();
    opt.batch = Bm, opt.seq_len = T, opt.threads = 1, opt.seed = a->seed;
    if (a->zero) opt.shards = N, opt.shard = r;
    hg_model *m = NULL;
    hg_dist *d = NULL;
    if (hg_model_create(&m, &cfg, &opt) != HG_OK) rc = fail_run(r, "hg_model_create");
    if (!rc && hg_dist_create(&d, comm, m, &dopt) != HG_OK) rc = fail_run(r, "hg_dist_create");
    if (!rc && a->load) rc = load_ckpt(d, m, a->load);
    FILE *out = !rc && r == 0 && a->out ? fopen(a->out, "w") : NULL;
    hg_adamw adamw = hg_adamw_default();
    adamw.lr = 1e-3f, adamw.grad_clip = 2.0f; /* clipping binds on some steps */
    int32_t x[MAX_STEPS * T], y[MAX_STEPS * T];
    for (int s = a->start; !rc && s < a->start + a->steps; s++) {
        if (r == a->stall_rank && s == a->stall_step) sleep(60);
        if (r == a->die_rank && s == a->die_step) raise(SIGKILL);
        double loss_sum = 0;
        hg_zero_grad(m);
        for (int k = 0; !rc && k < a->accum; k++) {
            for (int b = 0; b < Bm; b++) sequence(s, r * Bl + k * Bm + b, cfg.vocab_size, x + b * T, y + b * T);
            float loss;
            if (hg_dist_forward_backward(d, x, y, Bm, T, 1.0f / a->accum, k == a->accum - 1, &loss) != HG_OK)
                rc = fail_run(r, "forward_backward");
            loss_sum += loss / a->accum;
        }
        float norm = 0;
        if (!rc && hg_dist_optimizer_step(d, &adamw, &norm) != HG_OK) rc = fail_run(r, "optimizer_step");
        if (!rc && hg_dist_sum(d, &loss_sum, 1) != HG_OK) rc = fail_run(r, "sum");
        if (!rc && out) fprintf(out, "%d %a %a\n", s, loss_sum / N, (double)norm);
        if (!rc && s == a->start) {
            hg_dist_stats st = hg_dist_get_stats(d);
            if (r == 0)
                printf("ranks %d zero %d: %d buckets, %d done during backward; optimizer state %zu bytes per rank\n", N,
                       a->zero, st.buckets, st.buckets_done_in_backward, st.optimizer_bytes);
        }
    }
    if (out) fclose(out);
    if (!rc && !params_agree(d, m, N)) rc = 4, fprintf(stderr, "rank %d: parameters differ across ranks\n", r);
    if (!rc && a->save) rc = save_ckpt(d, m, r, a->save);
    hg_dist_free(d);
    hg_model_free(m);
    hg_comm_close(comm);
    return rc;
}

static int parse_run(int argc, char **argv, run_args *a) {
    *a = (run_args){.steps = 4, .batch = 4, .accum = 1, .stall_rank = -1, .die_rank = -1, .bucket = (size_t)25 << 20,
                    .timeout = 60, .seed = 7};
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--zero")) a->zero = atoi(v);
        else if (!strcmp(k, "--steps")) a->steps = atoi(v);
        else if (!strcmp(k, "--start")) a->start = atoi(v);
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--accum")) a->accum = atoi(v);
        else if (!strcmp(k, "--bucket")) a->bucket = (size_t)atol(v);
        else if (!strcmp(k, "--timeout")) a->timeout = atof(v);
        else if (!strcmp(k, "--seed")) a->seed = (uint64_t)atol(v);
        else if (!strcmp(k, "--stall")) a->stall_rank = 1, a->stall_step = atoi(v);
        else if (!strcmp(k, "--die")) a->die_rank = 1, a->die_step = atoi(v);
        else if (!strcmp(k, "--out")) a->out = v;
        else if (!strcmp(k, "--save")) a->save = v;
        else if (!strcmp(k, "--load")) a->load = v;
        else return fprintf(stderr, "test_dist run: unknown flag %s\n", k), 0;
    }
    return a->batch > 0 && a->batch <= MAX_STEPS && a->accum > 0;
}

/* ------------------------------------------------------------- the test */

static char launcher[1024]; /* "mpirun [flags] -n" */
static char self[1024];
static char dir[256];       /* scratch directory */

/* Runs `test_dist run ARGS` on np ranks (np 0: alone, without the launcher); output in
 * dir/name.log. Returns the exit status; *secs the wall time. */
static int launch(int np, const char *name, const char *args, double *secs) {
    char cmd[4096];
    if (np == 0) snprintf(cmd, sizeof cmd, "%s run %s > %s/%s.log 2>&1", self, args, dir, name);
    else snprintf(cmd, sizeof cmd, "%s %d %s run %s > %s/%s.log 2>&1", launcher, np, self, args, dir, name);
    double t0 = hg_now();
    int st = system(cmd);
    if (secs) *secs = hg_now() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static char *slurp(const char *name, const char *ext) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, ext);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 20);
    if (buf) fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    return buf;
}

static int run_ok(int np, const char *name, const char *args) {
    char full[2048];
    snprintf(full, sizeof full, "%s --out %s/%s.txt", args, dir, name);
    int st = launch(np, name, full, NULL);
    if (st != 0) {
        char *log = slurp(name, ".log");
        fprintf(stderr, "run %s (np %d: %s) exited %d:\n%s\n", name, np, args, st, log ? log : "");
        free(log);
        check_failures++;
        return 0;
    }
    char *log = slurp(name, ".log");
    if (log && *log) printf("  %s: %s", name, log);
    free(log);
    return 1;
}

typedef struct traj {
    int n, step[MAX_STEPS];
    double loss[MAX_STEPS], norm[MAX_STEPS];
} traj;

static traj read_traj(const char *name) {
    traj t = {0};
    char *txt = slurp(name, ".txt");
    for (char *p = txt; p && t.n < MAX_STEPS && *p;) {
        char *e;
        t.step[t.n] = (int)strtol(p, &e, 10);
        if (e == p) break;
        t.loss[t.n] = strtod(e, &e);
        t.norm[t.n] = strtod(e, &e);
        t.n++;
        p = e;
    }
    free(txt);
    return t;
}

/* b's steps equal a's (offset: b starts at a's step `from`), within rtol; 0: bitwise. */
static double compare(const char *an, const char *bn, int from, double rtol) {
    traj a = read_traj(an), b = read_traj(bn);
    double worst = 0;
    CHECK(b.n > 0 && from + b.n <= a.n);
    for (int i = 0; i < b.n && from + i < a.n; i++) {
        CHECK(a.step[from + i] == b.step[i]);
        double dl = fabs(a.loss[from + i] - b.loss[i]) / fabs(a.loss[from + i]);
        double dn = fabs(a.norm[from + i] - b.norm[i]) / fabs(a.norm[from + i]);
        worst = fmax(worst, fmax(dl, dn));
        if (!(dl <= rtol && dn <= rtol)) {
            fprintf(stderr, "%s vs %s, step %d: loss %.9g vs %.9g, norm %.9g vs %.9g (rtol %g)\n", an, bn, b.step[i],
                    a.loss[from + i], b.loss[i], a.norm[from + i], b.norm[i], rtol);
            check_failures++;
        }
    }
    printf("%-10s vs %-10s from step %d: %d steps, worst relative difference %.3g\n", an, bn, from, b.n, worst);
    return worst;
}

static int same_file(const char *a, const char *b) {
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a), snprintf(pb, sizeof pb, "%s/%s", dir, b);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Both ranks printed a line "rank R: ..." that says `want`. */
static void expect_on_every_rank(const char *name, const char *want) {
    char *log = slurp(name, ".log");
    for (int r = 0; r < 2; r++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "rank %d: ", r);
        int found = 0;
        for (char *p = log; p && !found && (p = strstr(p, prefix)); p++) {
            char *end = strchr(p, '\n'), *hit = strstr(p, want);
            found = hit && (!end || hit < end);
        }
        if (!found) fprintf(stderr, "%s: no line from rank %d says \"%s\":\n%s\n", name, r, want, log ? log : "");
        CHECK(found);
    }
    free(log);
}

/* Fp32 sums in a different order (one GEMM over B rows against two over B/2 rows and an
 * MPI sum) differ by ~1e-7 relative per gradient. Seen: <= 3.2e-7 over 6 steps. */
#define RTOL 3e-6

static int test(void) {
    const char *B = "--batch 4 --steps 6", *B3 = "--batch 4 --steps 3", *R3 = "--batch 4 --steps 3 --start 3";
    char args[1024];
    /* 1 rank x B, the reference, and a 3-step run to resume from */
    run_ok(0, "one", B);
    snprintf(args, sizeof args, "%s --save %s/one3.ckpt", B3, dir);
    run_ok(0, "one3", args);
    compare("one", "one3", 0, 0);
    /* 2 ranks x B/2, small buckets (one per layer) and the default (one bucket) */
    run_ok(2, "two", "--batch 4 --steps 6 --bucket 16384");
    compare("one", "two", 0, RTOL);
    run_ok(2, "two_1bk", B);
    compare("one", "two_1bk", 0, RTOL);
    snprintf(args, sizeof args, "--batch 4 --steps 6 --zero 1 --bucket 16384 --save %s/zero6.ckpt", dir);
    run_ok(2, "zero", args);
    compare("one", "zero", 0, RTOL);
    compare("two", "zero", 0, RTOL);
    run_ok(2, "zero_acc", "--batch 4 --steps 6 --zero 1 --accum 2 --bucket 16384");
    compare("one", "zero_acc", 0, RTOL);
    /* resume: 1 -> 2 ranks (ZeRO-1), 2 (ZeRO-1) -> 1, and bit-exact on the same count */
    snprintf(args, sizeof args, "%s --zero 1 --load %s/one3.ckpt", R3, dir);
    run_ok(2, "one_to_two", args);
    compare("one", "one_to_two", 3, RTOL);
    snprintf(args, sizeof args, "%s --zero 1 --bucket 16384 --save %s/zero3.ckpt", B3, dir);
    run_ok(2, "zero3", args);
    snprintf(args, sizeof args, "%s --load %s/zero3.ckpt", R3, dir);
    run_ok(0, "two_to_one", args);
    compare("zero", "two_to_one", 3, RTOL);
    compare("one", "two_to_one", 3, RTOL);
    snprintf(args, sizeof args, "%s --zero 1 --bucket 16384 --load %s/zero3.ckpt --save %s/zero3_6.ckpt", R3, dir, dir);
    run_ok(2, "zero_res", args);
    compare("zero", "zero_res", 3, 0);
    CHECK(same_file("zero6.ckpt", "zero3_6.ckpt"));
    snprintf(args, sizeof args, "%s --load %s/one3.ckpt", R3, dir);
    run_ok(0, "one_res", args);
    compare("one", "one_res", 3, 0);

    /* bad input: every rank says why */
    char mpmd[2048];
    snprintf(mpmd, sizeof mpmd, "--seed 1 : -n 1 %s run --seed 2", self);
    CHECK(launch(1, "mismatch", mpmd, NULL) != 0);
    expect_on_every_rank("mismatch", "different model or training config");
    CHECK(launch(2, "indivisible", "--batch 3", NULL) != 0);
    expect_on_every_rank("indivisible", "not divisible by the 2 ranks");
    /* failure: a hung rank, then a dead one; the other stops within a bounded time */
    double secs;
    CHECK(launch(2, "hang", "--timeout 3 --stall 1", &secs) != 0);
    char *log = slurp("hang", ".log");
    CHECK(log && strstr(log, "rank 0: ") && strstr(log, "did not complete within 3 s"));
    printf("hung rank: the job stopped after %.1f s\n", secs);
    CHECK(secs < 30);
    free(log);
    CHECK(launch(2, "dead", "--timeout 3 --die 1", &secs) != 0);
    printf("dead rank: the job stopped after %.1f s\n", secs);
    CHECK(secs < 30);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "run")) {
        run_args a;
        if (!parse_run(argc, argv, &a)) return 2;
        return worker(&a);
    }
    if (argc < 2) return fprintf(stderr, "usage: test_dist MPIEXEC [FLAGS...] | test_dist run [flags]\n"), 2;
    size_t len = 0;
    for (int i = 1; i < argc; i++) len += (size_t)snprintf(launcher + len, sizeof launcher - len, "%s ", argv[i]);
    snprintf(launcher + len, sizeof launcher - len, "%s-n", getuid() == 0 ? "--allow-run-as-root " : "");
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 2;
    self[n] = '\0';
    snprintf(dir, sizeof dir, "/tmp/hg_test_dist_XXXXXX");
    if (!mkdtemp(dir)) return 2;
    test();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!check_failures) system(cmd);
    else fprintf(stderr, "logs in %s\n", dir);
    CHECK_DONE();
}
