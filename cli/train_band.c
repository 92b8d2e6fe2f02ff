/* The loss band (train_band.h). */
#include "train_band.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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

char *band_to_json(const loss_band *b, int64_t good_step) {
    cJSON *j = cJSON_CreateObject(), *l = cJSON_AddArrayToObject(j, "losses");
    for (int i = 0; l && i < b->n; i++) { /* 17 digits, exact (cJSON's own printing rounds to 15 when close) */
        char num[32];
        snprintf(num, sizeof num, "%.17g", b->loss[i]);
        cJSON_AddItemToArray(l, cJSON_CreateRaw(num));
    }
    cJSON_AddNumberToObject(j, "at", b->at);
    cJSON_AddNumberToObject(j, "open_since", (double)b->open_since);
    cJSON_AddNumberToObject(j, "outside_streak", b->outside_streak);
    cJSON_AddNumberToObject(j, "inside_streak", b->inside_streak);
    cJSON_AddNumberToObject(j, "good_step", (double)good_step);
    char *s = l ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    return s;
}

/* key as an integer in [lo, hi], else 0 with err set. */
static int int_of(const cJSON *j, const char *key, double lo, double hi, double *out, char *err, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) || v->valuedouble != floor(v->valuedouble))
        return snprintf(err, cap, "'%s' must be an integer in [%.0f, %.0f]", key, lo, hi), 0;
    *out = v->valuedouble;
    return 1;
}

int band_from_json(loss_band *b, int64_t *good_step, const char *text, size_t len, char *err, size_t cap) {
    if (memchr(text, 0, len)) return snprintf(err, cap, "a NUL byte in the text"), 1;
    cJSON *j = cJSON_ParseWithLength(text, len);
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "losses");
    loss_band r = {.z = b->z};
    double at = 0, since = 0, out = 0, in = 0, good = 0, huge = 9.0e15; /* int64 steps, exactly as doubles */
    int ok = cJSON_IsObject(j);
    if (!ok) snprintf(err, cap, "not a JSON object");
    else if (!cJSON_IsArray(l) || cJSON_GetArraySize(l) > BAND_WINDOW)
        ok = 0, snprintf(err, cap, "'losses' must be a list of at most %d numbers", BAND_WINDOW);
    for (const cJSON *e = ok ? l->child : NULL; e; e = e->next) {
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble)) {
            ok = 0, snprintf(err, cap, "'losses' item %d is not a finite number", r.n + 1);
            break;
        }
        r.loss[r.n++] = e->valuedouble;
    }
    ok = ok && int_of(j, "at", 0, BAND_WINDOW - 1, &at, err, cap) && int_of(j, "open_since", 0, huge, &since, err, cap) &&
         int_of(j, "outside_streak", 0, INT32_MAX, &out, err, cap) &&
         int_of(j, "inside_streak", 0, INT32_MAX, &in, err, cap) && int_of(j, "good_step", -1, huge, &good, err, cap);
    if (ok && r.n < BAND_WINDOW && (int)at != r.n) /* the ring fills in order before it wraps */
        ok = 0, snprintf(err, cap, "'at' is %d but 'losses' holds %d of %d", (int)at, r.n, BAND_WINDOW);
    cJSON_Delete(j);
    if (!ok) return 1;
    r.at = (int)at, r.open_since = (int64_t)since, r.outside_streak = (int)out, r.inside_streak = (int)in;
    *b = r;
    *good_step = (int64_t)good;
    return 0;
}
