/* Option-value parsing and usage errors shared by the commands: every bad option is one
 * line on stderr naming it, and exit status 2 (handgrad --help lists the statuses). */
#ifndef HG_CLI_ARGS_H
#define HG_CLI_ARGS_H

#include <stdint.h>

/* The line for a getopt_long result of '?' (an unknown option) or ':' (a value missing;
 * the option string must start with ':'), from the argv and optind after the call, with
 * opterr = 0. Returns 2, the usage-error exit status. */
int cli_bad_option(const char *cmd, int c, char *const *argv);
/* A whole decimal number in [lo, hi], or a double in [lo, hi] (finite); else the line
 * "handgrad CMD: FLAG 'ARG' must be ..." and -1. */
int cli_parse_i64(const char *cmd, const char *flag, const char *arg, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_int(const char *cmd, const char *flag, const char *arg, int lo, int hi, int *out);
int cli_parse_f64(const char *cmd, const char *flag, const char *arg, double lo, double hi, double *out);

#endif
