/* What `handgrad train` shows and records: the live progress bar (a terminal: one line
 * redrawn in place) or plain lines (a pipe or file), train.jsonl (one object per step,
 * eval and sample records), and loss.svg (train and val loss), all in the run folder. */
#ifndef HG_CLI_TRAIN_LOG_H
#define HG_CLI_TRAIN_LOG_H

#include <stdint.h>
#include <stdio.h>

typedef struct step_record {
    int64_t step;      /* 1-based: the step just taken */
    int64_t max_steps;
    double loss;       /* mean over the micro-batches; NaN or Inf when skipped */
    double lr, grad_norm;
    uint64_t tokens;   /* consumed so far */
    uint64_t max_tokens; /* --max-tokens, or 0 (--max-steps): the bar then shows
                            tokens / max_tokens instead of step / max_steps */
    double seconds;    /* this step's wall time */
    double tokens_per_s, peak_fraction; /* smoothed */
    int skipped;       /* the update was not applied (non-finite loss or gradient norm) */
} step_record;

typedef struct train_log {
    char *jsonl_path, *svg_path;
    FILE *jsonl;
    double *tx, *ty, *vx, *vy; /* train and val loss history, for the plot */
    int nt, ct, nv, cv;
    int tty;                   /* stdout is a terminal: draw a bar */
    int bar_shown;             /* the live line is on the screen, the cursor at its end */
    int64_t lines;             /* plain lines printed */
    int64_t print_every;
    double last_draw, last_line, last_plot;
    int off;                   /* writes no files (data-parallel ranks other than 0) */
    int write_errno;           /* nonzero once a write of train.jsonl failed (said once on
                                  stderr); the trainer then stops at the end of the step */
} train_log;

/* Opens DIR/train.jsonl for appending. With resume_step >= 0, first drops the records
 * after that step (the run continues from there) and reloads the loss history. */
int train_log_open(train_log *l, const char *dir, int64_t resume_step, int64_t print_every);
void train_log_close(train_log *l);

void train_log_step(train_log *l, const step_record *r);
void train_log_eval(train_log *l, int64_t step, double val_loss);
void train_log_sample(train_log *l, int64_t step, const char *prompt, const char *text);
/* Redraws loss.svg (at most every 10 s unless force). */
void train_log_plot(train_log *l, int force);
/* Prints a line above the progress bar. */
void train_log_say(train_log *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the progress bar's line, if one is on the screen, so that a message written
 * next (to stdout or stderr) starts on a clean line; the bar is redrawn at the next step.
 * For messages that do not go through train_log_say (errors on stderr). */
void train_log_clear_line(void);

/* The bar and its percentage, "[####......]  40%", in exactly width columns (the bar
 * itself width - 7 of them): frac, clamped to [0, 1] (NaN as 0), of the bar filled with
 * '#', the rest '.', and the percentage rounded down, right-aligned in 4 columns. Writes
 * "" and returns 0 when width < 8 or buf cannot hold width + 1 bytes; else returns width. */
int train_log_bar(char *buf, size_t cap, double frac, int width);
/* The line drawn on a terminal of cols columns: "HEAD [bar] pct% | F | F | ...", within
 * cols - 1 columns. The bar is as wide as fits, 10 to 40 cells; to make room for it,
 * the fields of the highest rank are dropped first, down to those of rank 0. Where even
 * those leave no room, no bar and no percentage, and the same dropping (the plain
 * line); cut at cols - 1 columns if the rank-0 fields are still too long. Returns the
 * length written (at most cap - 1). */
int train_log_tty_line(char *buf, size_t cap, const char *head, const char *const *fields, const int *rank, int n,
                       double frac, int cols);

#endif
