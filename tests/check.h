/* Minimal test assertions shared by the C tests: each failing CHECK prints its
 * location and the test exits non-zero at the end (CHECK_DONE), so one run reports
 * every failure rather than the first. */
#ifndef HG_TESTS_CHECK_H
#define HG_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                    \
        }                                                                        \
    } while (0)

/* Checks an hg_status call; prints hg_last_error() on failure. */
#define CHECK_OK(call)                                                           \
    do {                                                                         \
        hg_status check_s_ = (call);                                             \
        if (check_s_ != HG_OK) {                                                 \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,  \
                    hg_status_name(check_s_), hg_last_error());                  \
            check_failures++;                                                    \
        }                                                                        \
    } while (0)

/* |got - want| <= atol + rtol*|want| */
#define CHECK_CLOSE(got, want, rtol, atol)                                       \
    do {                                                                         \
        double check_g_ = (got), check_w_ = (want);                              \
        if (!(fabs(check_g_ - check_w_) <= (atol) + (rtol) * fabs(check_w_))) {  \
            fprintf(stderr, "%s:%d: %s = %.9g, want %.9g (rtol %g, atol %g)\n",  \
                    __FILE__, __LINE__, #got, check_g_, check_w_, (double)(rtol), (double)(atol)); \
            check_failures++;                                                    \
        }                                                                        \
    } while (0)

/* The call fails with status `want` and its message contains `text` (a field, a file). */
#define CHECK_FAILS(call, want, text)                                                           \
    do {                                                                                        \
        hg_status s_ = (call);                                                                  \
        if (s_ != (want) || !strstr(hg_last_error(), (text))) {                                 \
            fprintf(stderr, "%s:%d: %s -> %s '%s', want %s naming '%s'\n", __FILE__, __LINE__, #call, \
                    hg_status_name(s_), hg_last_error(), hg_status_name(want), text);            \
            check_failures++;                                                                   \
        }                                                                                       \
    } while (0)

/* A whole file as a NUL-terminated malloc'd string; NULL when it cannot be read. */
static inline char *check_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf) buf[fread(buf, 1, (size_t)n, f)] = 0;
    fclose(f);
    return buf;
}

#define CHECK_DONE()                                                             \
    do {                                                                         \
        if (check_failures) {                                                    \
            fprintf(stderr, "%d check(s) failed\n", check_failures);             \
            return 1;                                                            \
        }                                                                        \
        printf("ok\n");                                                          \
        return 0;                                                                \
    } while (0)

#endif
