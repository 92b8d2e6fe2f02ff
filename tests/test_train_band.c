/* The loss band of `handgrad train` (cli/train_band.c): its top from the losses inside
 * it, with a floor on the spread; excursions opened by a loss above it or not finite,
 * closed after BAND_CLOSE steps back inside; losses outside never widen it; z = 0 leaves
 * only non-finite losses outside; band.json reads back exactly and refusals name the key. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train_band.h"

int main(void) {
    loss_band b = {.z = 6};
    CHECK(isinf(band_top(&b, NULL)) && !band_outside(&b, 1e30) && band_outside(&b, NAN));
    /* 20 losses 3.00 and 3.02 alternating: spread 0.01, below the floor 5% of 3.01 */
    int64_t step = 0;
    for (int i = 0; i < 20; i++) CHECK(band_add(&b, ++step, i % 2 ? 3.02 : 3.00) == 0);
    double mean, top = band_top(&b, &mean);
    CHECK(fabs(mean - 3.01) < 1e-12 && fabs(top - (3.01 + 6 * 0.05 * 3.01)) < 1e-9);
    CHECK(!band_outside(&b, top - 1e-6) && band_outside(&b, top + 1e-6) && band_outside(&b, INFINITY));
    /* an excursion: opens at the first step outside, counts, and leaves the band as it was */
    CHECK(band_add(&b, ++step, 9.0) == 1 && b.open_since == step && b.outside_streak == 1);
    CHECK(band_add(&b, ++step, NAN) == 0 && b.outside_streak == 2 && b.open_since == step - 1);
    CHECK(band_top(&b, NULL) == top);
    /* back inside: closes after BAND_CLOSE steps, not before; one outside step restarts the count */
    for (int i = 0; i < BAND_CLOSE - 1; i++) CHECK(band_add(&b, ++step, 3.01) == 0 && b.open_since);
    CHECK(b.outside_streak == 0 && b.inside_streak == BAND_CLOSE - 1);
    CHECK(band_add(&b, ++step, 50.0) == 0 && b.open_since && b.inside_streak == 0);
    for (int i = 0; i < BAND_CLOSE - 1; i++) CHECK(band_add(&b, ++step, 3.01) == 0);
    CHECK(band_add(&b, ++step, 3.01) == -1 && b.open_since == 0);
    /* the window keeps the last BAND_WINDOW losses inside: a level that drifts down moves it */
    for (int i = 0; i < BAND_WINDOW; i++) band_add(&b, ++step, 1.0);
    top = band_top(&b, &mean);
    CHECK(mean == 1.0 && fabs(top - 1.6) < 1e-12 && band_outside(&b, 2.0));
    /* z = 0: no band */
    loss_band off = {.z = 0};
    for (int i = 0; i < 10; i++) band_add(&off, i + 1, 1.0);
    CHECK(!band_outside(&off, 1e30) && band_outside(&off, NAN) && band_add(&off, 11, 1e30) == 0 && !off.open_since);

    /* band.json: the state reads back exactly (every loss bit for bit, the ring position,
     * the streaks, the open excursion and the checkpoint to go back to), z is kept */
    loss_band s = {.z = 2};
    for (int i = 0; i < BAND_WINDOW + 7; i++) band_add(&s, i + 1, 3.0 + 1.0 / (i + 3)); /* wrapped ring */
    band_add(&s, 500, 1e9);                                                                /* an open excursion */
    char *j = band_to_json(&s, 120);
    loss_band r = {.z = 5};
    int64_t good = -7;
    char err[300] = "";
    CHECK(j && band_from_json(&r, &good, j, strlen(j), err, sizeof err) == 0);
    CHECK(r.z == 5 && good == 120 && r.n == s.n && r.at == s.at && r.open_since == 500 && r.outside_streak == 1 &&
          r.inside_streak == 0 && !memcmp(r.loss, s.loss, sizeof s.loss));
    r.z = s.z;
    CHECK(band_top(&r, NULL) == band_top(&s, NULL));
    free(j);
    /* refusals name the key */
    static const struct { const char *text, *needle; } bad[] = {
        {"[]", "not a JSON object"},
        {"{\"at\": 0}", "'losses'"},
        {"{\"losses\": [1, \"x\"], \"at\": 2}", "'losses' item 2"},
        {"{\"losses\": [1], \"at\": 0, \"open_since\": 0, \"outside_streak\": 0, \"inside_streak\": 0, \"good_step\": 1}",
         "'at' is 0 but 'losses' holds 1"},
        {"{\"losses\": [], \"at\": 0, \"open_since\": 2.5, \"outside_streak\": 0, \"inside_streak\": 0, \"good_step\": 1}",
         "'open_since'"},
        {"{\"losses\": [], \"at\": 0, \"open_since\": 0, \"outside_streak\": 5.5e40, \"inside_streak\": 0, \"good_step\": 1}",
         "'outside_streak'"},
        {"{\"losses\": [], \"at\": 0, \"open_since\": 0, \"outside_streak\": 0, \"inside_streak\": 0}", "'good_step'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        loss_band x = {.z = 1};
        CHECK(band_from_json(&x, &good, bad[i].text, strlen(bad[i].text), err, sizeof err) == 1 && strstr(err, bad[i].needle));
        if (!strstr(err, bad[i].needle)) fprintf(stderr, "band.json %zu: '%s', want '%s'\n", i, err, bad[i].needle);
    }
    CHECK(band_from_json(&r, &good, "{}\0", 3, err, sizeof err) == 1 && strstr(err, "NUL"));
    CHECK_DONE();
}
