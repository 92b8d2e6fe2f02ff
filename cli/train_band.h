/* The loss band of `handgrad train`: the mean and spread of the last 128 step losses
 * inside it, in the spirit of llm.c's z-score outlier check. A loss above
 * mean + z * spread, or not finite, is outside; the first such step opens an excursion,
 * which closes after 10 steps back inside. While one is open the trainer keeps every
 * checkpoint (the newest from before it is the one to go back to), may skip the
 * updates of outside steps (--skip-outliers), and stops after --max-band-steps steps
 * outside in a row, naming that checkpoint. */
#ifndef HG_CLI_TRAIN_BAND_H
#define HG_CLI_TRAIN_BAND_H

#include <stddef.h>
#include <stdint.h>

enum { BAND_WINDOW = 128, BAND_CLOSE = 10 };

typedef struct loss_band {
    double z;                 /* width in spreads; 0: no band (only non-finite is outside) */
    double loss[BAND_WINDOW]; /* ring of losses inside the band */
    int n, at;
    int64_t open_since;       /* first step of the open excursion, or 0 */
    int outside_streak;       /* steps outside in a row */
    int inside_streak;        /* steps inside in a row */
} loss_band;

/* The band's top for the losses so far (mean + z * spread, the spread at least 5% of
 * the mean and 0.1 nats, so that a short or flat history is not too narrow); +inf with
 * no loss yet or z = 0. */
double band_top(const loss_band *b, double *mean);
/* 1 when loss lies outside: not finite, or above band_top. */
int band_outside(const loss_band *b, double loss);
/* Takes step's loss: folds it in when inside, moves the streaks and the excursion.
 * Returns +1 when this step opened an excursion, -1 when it closed one, else 0. */
int band_add(loss_band *b, int64_t step, double loss);

/* The band's state as a checkpoint keeps it (band.json): the ring of losses, the
 * streaks, the open excursion and good_step (the newest checkpoint from before it), so
 * that a resumed run judges, skips and stops exactly as the uninterrupted one. A
 * malloc'd JSON object, or NULL when out of memory. */
char *band_to_json(const loss_band *b, int64_t good_step);
/* Reads band_to_json's text into *b (its z is kept) and *good_step. Returns 0, or 1 with
 * err naming the key that is missing or out of range. */
int band_from_json(loss_band *b, int64_t *good_step, const char *text, size_t len, char *err, size_t cap);

#endif
