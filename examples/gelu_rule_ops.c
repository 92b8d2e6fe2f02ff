/* A backward rule in the handgrad command: a plugin whose model hook puts gelu_rule.h's
 * GELU backward into every CPU model the command creates, so that `train`, `profile`,
 * `bench` and `generate` run it without a program of one's own (shared/seeds/000: find
 * the bottleneck in the backward pass, then replace its rule):
 *
 *     handgrad profile --model small                                   # the built-in
 *     handgrad --ops build/examples/libgelu_rule_ops.so profile --model small
 *
 * The command calls handgrad_ops_init once after loading the module; the module does not
 * link handgrad itself. At exit it reports on standard error how many times the rule ran,
 * which tests/cli_site_ops.sh checks. */
#include <stdio.h>
#include <stdlib.h>

#include "gelu_rule.h"

static long calls; /* the command runs one step at a time: no two calls overlap */

static void counted_backward(hg_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    calls++;
    gelu_rule_backward(be, dinp, inp, dout, n);
}

static void report(void) { fprintf(stderr, "gelu_rule_ops: the GELU backward rule ran %ld times\n", calls); }

static hg_status install(hg_model *m, void *ctx) {
    (void)ctx;
    return hg_override_gelu(m, HG_DEVICE_CPU, NULL, counted_backward);
}

hg_status handgrad_ops_init(void) {
    hg_status st = hg_add_model_hook("gelu_rule", install, NULL);
    if (st == HG_OK) atexit(report);
    return st;
}
