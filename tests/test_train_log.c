/* The progress display of `handgrad train` (cli/train_log.c): the bar and its percentage
 * as exact strings (train_log_bar); the terminal line at several widths, the bar as wide
 * as fits (10 to 40 cells), the fields of higher rank dropped to make room for it, then
 * the bar, the line cut at the last column but one (train_log_tty_line); and what train_log_step writes: on a terminal, the line
 * redrawn in place with "\r\033[K", cleared before a message and by
 * train_log_clear_line, the finished bar left as a line, tokens / max_tokens as the
 * proportion under --max-tokens; without one, the plain lines, byte for byte. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "train_log.h"

static void check_str(const char *got, const char *want, int line) {
    if (strcmp(got, want)) {
        fprintf(stderr, "test_train_log.c:%d:\n  got  \"%s\"\n  want \"%s\"\n", line, got, want);
        check_failures++;
    }
}
#define CHECK_STR(got, want) check_str(got, want, __LINE__)

static void test_bar(void) {
    char b[128];
    CHECK(train_log_bar(b, sizeof b, 0.25, 17) == 17);
    CHECK_STR(b, "[##........]  25%");
    train_log_bar(b, sizeof b, 0.0, 17);
    CHECK_STR(b, "[..........]   0%");
    train_log_bar(b, sizeof b, 1.0, 17);
    CHECK_STR(b, "[##########] 100%");
    train_log_bar(b, sizeof b, 0.999, 17); /* rounded down: full only when done */
    CHECK_STR(b, "[#########.]  99%");
    train_log_bar(b, sizeof b, 2.5, 17); /* clamped */
    CHECK_STR(b, "[##########] 100%");
    train_log_bar(b, sizeof b, -1.0, 17);
    CHECK_STR(b, "[..........]   0%");
    train_log_bar(b, sizeof b, NAN, 17);
    CHECK_STR(b, "[..........]   0%");
    train_log_bar(b, sizeof b, 0.4, 47); /* the widest bar the line draws: 40 cells */
    CHECK_STR(b, "[################........................]  40%");
    train_log_bar(b, sizeof b, 0.29, 107); /* 0.29 * 100 is 28.999...: still 29 */
    CHECK(b[29] == '#' && b[30] == '.' && !strcmp(b + 101, "]  29%"));
    CHECK(train_log_bar(b, sizeof b, 0.5, 8) == 8);
    CHECK_STR(b, "[.]  50%");
    /* too narrow, or no room in buf: nothing */
    CHECK(train_log_bar(b, sizeof b, 0.5, 7) == 0 && b[0] == 0);
    CHECK(train_log_bar(b, 17, 0.5, 17) == 0 && b[0] == 0);
    CHECK(train_log_bar(b, 18, 0.5, 17) == 17);
}

static void test_line(void) {
    const char *head = "step 240/600";
    const char *const f[] = {"loss 4.7351", "lr 2.13e-03", "gnorm 0.833", "6.1k tok/s", "31% peak", "ETA 1m02s"};
    const int rank[] = {0, 3, 2, 1, 4, 0}; /* as train_log_step ranks them */
    char b[512];                           /* all fields joined: 75 columns */
    /* wide: the bar stops at 40 cells */
    CHECK(train_log_tty_line(b, sizeof b, head, f, rank, 6, 0.4, 200) == 12 + 1 + 47 + 3 + 75);
    CHECK_STR(b, "step 240/600 [################........................]  40% | loss 4.7351 | lr 2.13e-03 | "
                 "gnorm 0.833 | 6.1k tok/s | 31% peak | ETA 1m02s");
    /* 120 columns: a bar of 21 cells fills the line to column 119 */
    CHECK(train_log_tty_line(b, sizeof b, head, f, rank, 6, 0.4, 120) == 119);
    CHECK_STR(b, "step 240/600 [########.............]  40% | loss 4.7351 | lr 2.13e-03 | gnorm 0.833 | 6.1k tok/s | "
                 "31% peak | ETA 1m02s");
    /* 109: the narrowest bar, 10 cells, with every field */
    CHECK(train_log_tty_line(b, sizeof b, head, f, rank, 6, 0.4, 109) == 108);
    CHECK_STR(b, "step 240/600 [####......]  40% | loss 4.7351 | lr 2.13e-03 | gnorm 0.833 | 6.1k tok/s | 31% peak | "
                 "ETA 1m02s");
    /* 108: the highest rank (% peak) goes, and the bar takes its room */
    CHECK(train_log_tty_line(b, sizeof b, head, f, rank, 6, 0.4, 108) == 107);
    CHECK_STR(b, "step 240/600 [########............]  40% | loss 4.7351 | lr 2.13e-03 | gnorm 0.833 | 6.1k tok/s | "
                 "ETA 1m02s");
    /* 80, the common terminal: lr and gnorm go too; loss, tok/s and ETA stay beside the bar */
    CHECK(train_log_tty_line(b, sizeof b, head, f, rank, 6, 0.4, 80) == 79);
    CHECK_STR(b, "step 240/600 [########............]  40% | loss 4.7351 | 6.1k tok/s | ETA 1m02s");
    /* 40: no room for a bar even beside the rank-0 fields: the plain line with them */
    CHECK(train_log_tty_line(b, sizeof b, head, f, rank, 6, 0.4, 40) == 38);
    CHECK_STR(b, "step 240/600 | loss 4.7351 | ETA 1m02s");
    /* narrower still: cut at the last column but one, never wrapped */
    CHECK(train_log_tty_line(b, sizeof b, head, f, rank, 6, 0.4, 30) == 29);
    CHECK_STR(b, "step 240/600 | loss 4.7351 | ");
    CHECK(train_log_tty_line(b, sizeof b, head, f, rank, 6, 0.4, 0) == 1);
    CHECK_STR(b, "s");
    /* a small buffer: cut, terminated */
    CHECK(train_log_tty_line(b, 10, head, f, rank, 6, 0.4, 200) == 9);
    CHECK_STR(b, "step 240/");
}

/* Runs fn with stdout going to a file; returns what it wrote (malloc'd). */
static char *capture(void (*fn)(train_log *), train_log *l) {
    char path[] = "/tmp/hg_train_log_out_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    fflush(stdout);
    int saved = dup(1);
    dup2(fd, 1);
    fn(l);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    char *buf = calloc((size_t)n + 1, 1);
    if (buf && pread(fd, buf, (size_t)n, 0) != n) buf[0] = 0;
    close(fd);
    unlink(path);
    return buf;
}

/* three steps of 1000 tokens at 1000 tok/s; under --max-tokens 2500 (3 steps), 2500 */
static uint64_t max_tokens;
static step_record rec(int64_t step) {
    return (step_record){.step = step, .max_steps = 3, .loss = 4.7351, .lr = 2.13e-3, .grad_norm = 0.833,
                         .tokens = 1000 * (uint64_t)step, .max_tokens = max_tokens, .seconds = 1,
                         .tokens_per_s = 1000, .peak_fraction = 0.31};
}

static void run_steps(train_log *l) {
    step_record r = rec(1);
    train_log_step(l, &r);
    train_log_say(l, "a message");
    r = rec(2);
    train_log_step(l, &r); /* drawn at once: the message cleared the line */
    train_log_clear_line();
    train_log_clear_line(); /* nothing on the screen: nothing written */
    r = rec(3);
    train_log_step(l, &r);
    train_log_say(l, "done");
}

#define F1 " | loss 4.7351 | lr 2.13e-03 | gnorm 0.833 | 1.0k tok/s | 31% peak | ETA 0m02s"
#define F2 " | loss 4.7351 | lr 2.13e-03 | gnorm 0.833 | 1.0k tok/s | 31% peak | ETA 0m01s"
#define F3 " | loss 4.7351 | lr 2.13e-03 | gnorm 0.833 | 1.0k tok/s | 31% peak | ETA 0m00s"
#define CLR "\r\033[K"

static void test_step(void) {
    char dir[] = "/tmp/hg_train_log_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    train_log l;
    setenv("COLUMNS", "112", 1); /* stdout is a file here: the width comes from $COLUMNS */

    /* a terminal: 112 - 1 columns less 8 of head, 75 of fields and 4 of separators leave
     * 24 for the bar: 17 cells */
    CHECK(train_log_open(&l, dir, -1, 0) == 0);
    l.tty = 1;
    char *out = capture(run_steps, &l);
    CHECK_STR(out ? out : "", CLR "step 1/3 [#####............]  33%" F1 CLR "a message\n"
                              CLR "step 2/3 [###########......]  66%" F2 CLR
                              CLR "step 3/3 [#################] 100%" F3 "\n"
                              "done\n");
    free(out);
    train_log_close(&l);

    /* --max-tokens 2500: the bar shows tokens / max_tokens, full at the last step */
    max_tokens = 2500;
    CHECK(train_log_open(&l, dir, -1, 0) == 0);
    l.tty = 1;
    out = capture(run_steps, &l);
    CHECK_STR(out ? out : "", CLR "step 1/3 [######...........]  40%" F1 CLR "a message\n"
                              CLR "step 2/3 [#############....]  80%" F2 CLR
                              CLR "step 3/3 [#################] 100%" F3 "\n"
                              "done\n");
    free(out);
    train_log_close(&l);
    max_tokens = 0;

    /* 80 columns: % peak and lr give way to a bar of 10 cells; the ETA stays */
    setenv("COLUMNS", "80", 1);
    CHECK(train_log_open(&l, dir, -1, 0) == 0);
    l.tty = 1;
    out = capture(run_steps, &l);
    CHECK(out && strstr(out, CLR "step 1/3 [###.......]  33% | loss 4.7351 | gnorm 0.833 | 1.0k tok/s | ETA 0m02s"
                             CLR "a message\n"));
    free(out);
    train_log_close(&l);
    unsetenv("COLUMNS");

    /* not a terminal, --print-every 1: today's plain lines, byte for byte */
    CHECK(train_log_open(&l, dir, -1, 1) == 0);
    l.tty = 0;
    out = capture(run_steps, &l);
    CHECK_STR(out ? out : "", "step 1/3" F1 "\na message\nstep 2/3" F2 "\nstep 3/3" F3 "\ndone\n");
    free(out);
    train_log_close(&l);

    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/loss.svg", dir);
    unlink(path);
    CHECK(rmdir(dir) == 0);
}

static void write_records(train_log *l) {
    train_log_sample(l, 7, "Hi", "a\"b\n\xE2\x82\xFF\xC3\xA9");
    train_log_eval(l, 7, 2.0);
}

/* The records of train.jsonl other than steps: a sample's text as valid UTF-8 JSON (each
 * byte outside a well-formed sequence becomes U+FFFD; the terminal gets the bytes as they
 * are), spaced as the step records are; an evaluation's loss and perplexity to 9 digits. */
static void test_records(void) {
    char dir[] = "/tmp/hg_train_log_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    train_log l;
    CHECK(train_log_open(&l, dir, -1, 0) == 0);
    l.tty = 0;
    char *out = capture(write_records, &l);
    CHECK(out && strstr(out, "---- sample at step 7 ----\nHia\"b\n\xE2\x82\xFF\xC3\xA9\n----\n"));
    free(out);
    train_log_close(&l);
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    FILE *f = fopen(path, "rb");
    char text[512] = "";
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    CHECK_STR(text, "{\"type\": \"sample\", \"step\": 7, \"prompt\": \"Hi\", \"text\": "
                    "\"a\\\"b\\n\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xC3\xA9\"}\n"
                    "{\"type\": \"eval\", \"step\": 7, \"val_loss\": 2, \"val_ppl\": 7.3890561}\n");
    unlink(path);
    snprintf(path, sizeof path, "%s/loss.svg", dir);
    unlink(path);
    CHECK(rmdir(dir) == 0);
}

int main(void) {
    test_records();
    test_bar();
    test_line();
    test_step();
    CHECK_DONE();
}
