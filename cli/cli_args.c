/* Option-value parsing and usage errors (cli_args.h). */
#include "cli_args.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int cli_bad_option(const char *cmd, int c, char *const *argv) {
    const char *opt = optind > 0 ? argv[optind - 1] : "?";
    fprintf(stderr, "handgrad %s: %s '%s'%s (see handgrad %s --help)\n", cmd, c == ':' ? "option" : "unknown option",
            opt, c == ':' ? " needs a value" : "", cmd);
    return 2;
}

int cli_parse_i64(const char *cmd, const char *flag, const char *arg, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (errno || end == arg || *end || v < lo || v > hi) {
        fprintf(stderr, "handgrad %s: %s '%s' must be a whole number in [%" PRId64 ", %" PRId64 "]\n", cmd, flag, arg,
                lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_int(const char *cmd, const char *flag, const char *arg, int lo, int hi, int *out) {
    int64_t v;
    if (cli_parse_i64(cmd, flag, arg, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_f64(const char *cmd, const char *flag, const char *arg, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (errno || end == arg || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "handgrad %s: %s '%s' must be a number in [%g, %g]\n", cmd, flag, arg, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}
