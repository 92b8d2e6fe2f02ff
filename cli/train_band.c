/* The loss band (train_band.h). */
#include "train_band.h"

#include <math.h>
#include <stddef.h>

double band_top(const loss_band *b, double *mean) {
    double s = 0, s2 = 0;
    for (int i = 0; i < b->n; i++) s += b->loss[i], s2 += b->loss[i] * b->loss[i];
    double m = b->n ? s / b->n : NAN, var = b->n ? s2 / b->n - m * m : 0;
    double spread = fmax(sqrt(fmax(var, 0.0)), fmax(0.05 * fabs(m), 0.1));
    if (mean) *mean = m;
    return b->n && b->z > 0 ? m + b->z * spread : INFINITY;
}

int band_outside(const loss_band *b, double loss) { return !isfinite(loss) || loss > band_top(b, NULL); }

int band_add(loss_band *b, int64_t step, double loss) {
    if (band_outside(b, loss)) {
        b->outside_streak++;
        b->inside_streak = 0;
        if (b->open_since) return 0;
        b->open_since = step;
        return 1;
    }
    b->loss[b->at] = loss;
    b->at = (b->at + 1) % BAND_WINDOW;
    b->n += b->n < BAND_WINDOW;
    b->outside_streak = 0;
    if (++b->inside_streak < BAND_CLOSE || !b->open_since) return 0;
    b->open_since = 0;
    return -1;
}
