/* Progress bar, plain progress lines, train.jsonl and loss.svg for `handgrad train`
 * (train_log.h). */
#include "train_log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli_io.h"
#include "core/timer.h"
#include "handgrad.h"
#include "svg.h"

static int push(double **x, double **y, int *n, int *cap, double a, double b) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 1024;
        double *nx = realloc(*x, sizeof **x * (size_t)c);
        if (nx) *x = nx;
        double *ny = nx ? realloc(*y, sizeof **y * (size_t)c) : NULL;
        if (ny) *y = ny;
        if (!nx || !ny) return 1;
        *cap = c;
    }
    (*x)[*n] = a;
    (*y)[(*n)++] = b;
    return 0;
}

/* Keeps the records of steps <= keep from an earlier train.jsonl and reloads the
 * history. The records dropped are normally the file's tail (the steps after the
 * checkpoint, a record cut short by a full disk): the file is then truncated in place,
 * so that a `tail -f` or a live TensorBoard export goes on reading it. Otherwise it is
 * rewritten atomically. */
static int rewind_log(train_log *l, int64_t keep) {
    size_t len;
    FILE *probe = fopen(l->jsonl_path, "rb");
    if (!probe) return 0; /* no log yet */
    fclose(probe);
    char *text = (char *)cli_read_input("train", l->jsonl_path, &len);
    if (!text) return 1;
    size_t kept = 0, tail = len; /* tail: where the first dropped record starts */
    int dropped = 0, kept_after = 0;
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        cJSON *j = cJSON_ParseWithLength(text + i, e - i);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        int keepit = cJSON_IsNumber(st) && st->valuedouble <= (double)keep;
        if (keepit) {
            const cJSON *loss = cJSON_GetObjectItemCaseSensitive(j, "loss");
            const cJSON *val = cJSON_GetObjectItemCaseSensitive(j, "val_loss");
            int is_step = cJSON_IsString(type) && !strcmp(type->valuestring, "step");
            if (is_step && cJSON_IsNumber(loss)) push(&l->tx, &l->ty, &l->nt, &l->ct, st->valuedouble, loss->valuedouble);
            if (cJSON_IsNumber(val)) push(&l->vx, &l->vy, &l->nv, &l->cv, st->valuedouble, val->valuedouble);
            memmove(text + kept, text + i, e - i);
            kept += e - i;
            text[kept++] = '\n';
            kept_after |= dropped;
        } else if (!dropped) {
            dropped = 1;
            tail = i;
        }
        cJSON_Delete(j);
        i = e + 1;
    }
    int rc = 0;
    if (dropped && !kept_after) {
        int fd = open(l->jsonl_path, O_WRONLY);
        if (fd < 0 || ftruncate(fd, (off_t)tail) != 0 || fsync(fd) != 0) {
            fprintf(stderr, "handgrad train: %s: cutting the log back to step %lld: %s\n", l->jsonl_path,
                    (long long)keep, strerror(errno));
            rc = 1;
        }
        if (fd >= 0) close(fd);
    } else if (dropped && hg_write_file_atomic(l->jsonl_path, text, kept) != HG_OK) {
        rc = cli_fail("train");
    }
    free(text);
    return rc;
}

int train_log_open(train_log *l, const char *dir, int64_t resume_step, int64_t print_every) {
    memset(l, 0, sizeof *l);
    size_t n = strlen(dir) + 16;
    l->jsonl_path = malloc(n);
    l->svg_path = malloc(n);
    if (!l->jsonl_path || !l->svg_path) return fprintf(stderr, "handgrad train: out of memory\n"), 1;
    snprintf(l->jsonl_path, n, "%s/train.jsonl", dir);
    snprintf(l->svg_path, n, "%s/loss.svg", dir);
    l->tty = isatty(1);
    l->print_every = print_every;
    l->last_line = l->last_plot = hg_now();
    if (resume_step >= 0 && rewind_log(l, resume_step)) return 1;
    l->jsonl = fopen(l->jsonl_path, resume_step >= 0 ? "a" : "w");
    if (!l->jsonl) {
        fprintf(stderr, "handgrad train: %s: %s\n", l->jsonl_path, strerror(errno));
        return 1;
    }
    return 0;
}

/* The log whose bar is on the screen, for train_log_clear_line. */
static train_log *live;

static void clear_bar(train_log *l) {
    if (l->tty && l->bar_shown) {
        fputs("\r\033[K", stdout);
        fflush(stdout);
    }
    l->bar_shown = 0;
    if (live == l) live = NULL;
}

void train_log_clear_line(void) {
    if (live) clear_bar(live);
}

void train_log_close(train_log *l) {
    clear_bar(l);
    fflush(stdout);
    if (l->jsonl) fclose(l->jsonl);
    free(l->jsonl_path);
    free(l->svg_path);
    free(l->tx), free(l->ty), free(l->vx), free(l->vy);
    memset(l, 0, sizeof *l);
}

/* Ends a record of train.jsonl: flushed, and a failed write (a full disk) recorded and
 * said once. */
static void jsonl_flush(train_log *l) {
    errno = 0;
    if ((fflush(l->jsonl) != 0 || ferror(l->jsonl)) && !l->write_errno) {
        l->write_errno = errno ? errno : EIO;
        clear_bar(l);
        fprintf(stderr, "handgrad train: %s: writing the log failed: %s\n", l->jsonl_path, strerror(l->write_errno));
    }
}

/* A JSON number, or null for NaN and Inf (JSON has neither). */
static void json_num(FILE *f, const char *key, double v, const char *fmt) {
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
}

static void duration(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) snprintf(buf, cap, "--");
    else if (s < 3600) snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

static void rate(char *buf, size_t cap, double tps) {
    if (tps >= 1e6) snprintf(buf, cap, "%.2fM", tps / 1e6);
    else if (tps >= 1e3) snprintf(buf, cap, "%.1fk", tps / 1e3);
    else snprintf(buf, cap, "%.0f", tps);
}

/* stdout's columns; where the terminal does not say, $COLUMNS, else 80 */
static int term_width(void) {
    struct winsize w;
    if (ioctl(1, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
    const char *env = getenv("COLUMNS");
    int c = env ? atoi(env) : 0;
    return c > 0 && c < 10000 ? c : 80;
}

enum { BAR_MIN = 10, BAR_MAX = 40, BAR_EXTRA = 7 }; /* cells of the bar; "[", "]", " 100%" */

int train_log_bar(char *buf, size_t cap, double frac, int width) {
    int inner = width - BAR_EXTRA;
    if (cap) buf[0] = 0;
    if (inner < 1 || cap < (size_t)width + 1) return 0;
    frac = frac > 0 ? (frac < 1 ? frac : 1) : 0; /* NaN as 0 */
    /* rounded down, with a little slack so that 0.29 of 100 is 29, not 28.999... */
    int fill = (int)(frac * inner + 1e-9), pct = (int)(frac * 100 + 1e-9);
    buf[0] = '[';
    memset(buf + 1, '#', (size_t)fill);
    memset(buf + 1 + fill, '.', (size_t)(inner - fill));
    snprintf(buf + 1 + inner, cap - 1 - (size_t)inner, "] %3d%%", pct);
    return width;
}

/* "F | F | ...": the fields of rank <= level, in their order. */
static int join_fields(char *out, size_t cap, const char *const *fields, const int *rank, int n, int level) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (rank[i] > level) continue;
        int w = snprintf(out + k, cap - k, "%s%s", k ? " | " : "", fields[i]);
        if (w < 0 || (size_t)w >= cap - k) break;
        k += (size_t)w;
    }
    return (int)k;
}

int train_log_tty_line(char *buf, size_t cap, const char *head, const char *const *fields, const int *rank, int n,
                       double frac, int cols) {
    if (!cap) return 0;
    /* the last column stays empty: a character there leaves some terminals' cursor
     * waiting to wrap, and the next '\r' would then go to the wrong row */
    int avail = cols > 1 ? cols - 1 : 1, hl = (int)strlen(head), top = 0;
    for (int i = 0; i < n; i++) top = rank[i] > top ? rank[i] : top;
    char joined[1024], bar[BAR_MAX + BAR_EXTRA + 1];
    /* the most fields that leave room for the narrowest bar; else no bar, and the most
     * fields that fit without it; else the rank-0 fields, cut */
    for (int with_bar = 1; with_bar >= 0; with_bar--)
        for (int level = top; level >= 0; level--) {
            int fl = join_fields(joined, sizeof joined, fields, rank, n, level);
            int room = avail - hl - fl - 3 - with_bar; /* " " before the bar, " | " after */
            if (room < (with_bar ? BAR_MIN + BAR_EXTRA : 0) && (with_bar || level > 0)) continue;
            int barw = room > BAR_MAX + BAR_EXTRA ? BAR_MAX + BAR_EXTRA : room;
            int has = with_bar && train_log_bar(bar, sizeof bar, frac, barw) > 0;
            int w = snprintf(buf, cap, "%s%s%s | %s", head, has ? " " : "", has ? bar : "", joined);
            if (w < 0) w = 0;
            if (w > (int)cap - 1) w = (int)cap - 1;
            if (w > avail) buf[w = avail] = 0;
            return w;
        }
    return 0;
}

void train_log_step(train_log *l, const step_record *r) {
    if (l->off) return;
    FILE *f = l->jsonl;
    fprintf(f, "{\"type\": \"step\", \"step\": %lld", (long long)r->step);
    json_num(f, "loss", r->loss, "%.9g");
    json_num(f, "lr", r->lr, "%.9g");
    json_num(f, "grad_norm", r->grad_norm, "%.9g");
    fprintf(f, ", \"tokens\": %llu", (unsigned long long)r->tokens);
    json_num(f, "seconds", r->seconds, "%.6f");
    json_num(f, "tokens_per_s", r->tokens_per_s, "%.1f");
    if (r->skipped) fputs(", \"skipped\": true", f);
    fputs("}\n", f);
    jsonl_flush(l);
    if (!r->skipped) push(&l->tx, &l->ty, &l->nt, &l->ct, (double)r->step, r->loss);

    double now = hg_now();
    int last = r->step == r->max_steps;
    /* a terminal redraws at most 10 times a second, but at once after a message cleared
     * the line; piped, a line every --print-every steps (or ~5 s), the first, the last and
     * every skipped step */
    int due = l->tty ? last || !l->bar_shown || now - l->last_draw >= 0.1
                     : last || !l->lines || r->skipped ||
                           (l->print_every > 0 ? r->step % l->print_every == 0 : now - l->last_line >= 5.0);
    if (!due) return;
    char eta[32], tps[32], head[64], fb[7][48], out[1024];
    double tokens_per_step = (double)r->tokens / (double)r->step;
    duration(eta, sizeof eta, r->tokens_per_s > 0 ? (double)(r->max_steps - r->step) * tokens_per_step / r->tokens_per_s : NAN);
    rate(tps, sizeof tps, r->tokens_per_s);
    snprintf(head, sizeof head, "step %lld/%lld", (long long)r->step, (long long)r->max_steps);
    /* the line's fields; a narrow terminal drops the higher ranks first */
    snprintf(fb[0], sizeof fb[0], "loss %.4f", r->loss);
    snprintf(fb[1], sizeof fb[1], "lr %.2e", r->lr);
    snprintf(fb[2], sizeof fb[2], "gnorm %.3f", r->grad_norm);
    snprintf(fb[3], sizeof fb[3], "%s tok/s", tps);
    snprintf(fb[4], sizeof fb[4], "%.0f%% peak", 100 * r->peak_fraction);
    snprintf(fb[5], sizeof fb[5], "ETA %s", eta);
    snprintf(fb[6], sizeof fb[6], "skipped");
    const char *const fields[7] = {fb[0], fb[1], fb[2], fb[3], fb[4], fb[5], fb[6]};
    static const int rank[7] = {0, 3, 2, 1, 4, 0, 0};
    const int n = r->skipped ? 7 : 6;
    if (l->tty) {
        l->last_draw = now;
        double frac = r->max_tokens ? (double)r->tokens / (double)r->max_tokens : (double)r->step / (double)r->max_steps;
        train_log_tty_line(out, sizeof out, head, fields, rank, n, frac, term_width());
        fputs("\r\033[K", stdout);
        fputs(out, stdout);
        if (last) { /* the finished bar stays, as a line of its own */
            fputc('\n', stdout);
            l->bar_shown = 0;
            if (live == l) live = NULL;
        } else {
            l->bar_shown = 1;
            live = l;
        }
        fflush(stdout);
    } else {
        l->lines++;
        l->last_line = now;
        join_fields(out, sizeof out, fields, rank, n, INT_MAX); /* every field */
        printf("%s | %s\n", head, out);
        fflush(stdout);
    }
}

void train_log_say(train_log *l, const char *fmt, ...) {
    clear_bar(l);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void train_log_eval(train_log *l, int64_t step, double val_loss) {
    if (l->off) return;
    fprintf(l->jsonl, "{\"type\": \"eval\", \"step\": %lld", (long long)step);
    json_num(l->jsonl, "val_loss", val_loss, "%.9g");
    json_num(l->jsonl, "val_ppl", exp(val_loss), "%.9g");
    fputs("}\n", l->jsonl);
    jsonl_flush(l);
    push(&l->vx, &l->vy, &l->nv, &l->cv, (double)step, val_loss);
    train_log_say(l, "step %lld: val loss %.4f, perplexity %.2f", (long long)step, val_loss, exp(val_loss));
    train_log_plot(l, 1);
}

/* The length of the well-formed UTF-8 sequence at p (n bytes left), or 0 when it is not
 * one: no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
    if (p[0] < 0x80) return 1;
    size_t len = p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3 : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] > 0x9F) || (p[0] == 0xF0 && p[1] < 0x90) ||
        (p[0] == 0xF4 && p[1] > 0x8F))
        return 0;
    return len;
}

/* A JSON string for text (malloc'd, quoted and escaped), each byte that is not part of
 * well-formed UTF-8 replaced by U+FFFD: a sample may end inside a character, or hold
 * bytes a byte-level tokenizer made, and JSON readers refuse what is not UTF-8. */
static char *json_text(const char *text) {
    size_t n = strlen(text), k = 0;
    char *clean = malloc(3 * n + 1), *out = NULL;
    if (!clean) return NULL;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq((const unsigned char *)text + i, n - i);
        if (len) memcpy(clean + k, text + i, len), k += len, i += len;
        else memcpy(clean + k, "\xEF\xBF\xBD", 3), k += 3, i++;
    }
    clean[k] = 0;
    cJSON *j = cJSON_CreateString(clean);
    if (j) out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(clean);
    return out;
}

void train_log_sample(train_log *l, int64_t step, const char *prompt, const char *text) {
    if (l->off) return;
    char *p = json_text(prompt), *t = json_text(text);
    if (p && t) {
        fprintf(l->jsonl, "{\"type\": \"sample\", \"step\": %lld, \"prompt\": %s, \"text\": %s}\n", (long long)step,
                p, t);
        jsonl_flush(l);
    } else if (!l->write_errno) { /* a record lost: the run stops as after a failed write */
        l->write_errno = ENOMEM;
        clear_bar(l);
        fprintf(stderr, "handgrad train: %s: the sample record: out of memory\n", l->jsonl_path);
    }
    free(p);
    free(t);
    size_t n = strlen(text);
    train_log_say(l, "---- sample at step %lld ----\n%s%s%s----", (long long)step, prompt, text,
                  n && text[n - 1] == '\n' ? "" : "\n");
}

void train_log_plot(train_log *l, int force) {
    if (l->off) return;
    double now = hg_now();
    if (!force && now - l->last_plot < 10.0) return;
    l->last_plot = now;
    /* at most ~1000 train points: means over equal runs of steps */
    int stride = l->nt / 1000 + 1, n = (l->nt + stride - 1) / stride;
    double *x = malloc(sizeof *x * (size_t)(n + 1)), *y = malloc(sizeof *y * (size_t)(n + 1));
    if (!x || !y) {
        free(x), free(y);
        return;
    }
    for (int i = 0; i < n; i++) {
        double sx = 0, sy = 0;
        int k = 0;
        for (int j = i * stride; j < l->nt && j < (i + 1) * stride; j++, k++) sx += l->tx[j], sy += l->ty[j];
        x[i] = sx / k;
        y[i] = sy / k;
    }
    svg_series s[2] = {{"train loss", x, y, n, 0, 0}, {"val loss", l->vx, l->vy, l->nv, 0, 1}};
    svg_plot p = {.title = "handgrad train", .xlabel = "step", .ylabel = "loss (nats/token)", .series = s,
                  .nseries = l->nv ? 2 : 1};
    if (svg_write(l->svg_path, &p) != 0) {
        int e = errno;
        clear_bar(l);
        fprintf(stderr, "handgrad train: warning: %s: %s\n", l->svg_path, strerror(e));
    }
    free(x);
    free(y);
}
