/* `handgrad ops`: the site ops that --ops plugins registered, and a gradient check of
 * each (hg_gradcheck_site) on the shapes a model would give it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_io.h"
#include "cli_model.h"
#include "commands.h"
#include "handgrad_ext.h"

static const char synopsis[] =
    "usage: handgrad [--ops PLUGIN.so]... ops [--check] [--model NAME]\n"
    "                                         [--arch F=V,...] [--rows N]\n";
static const char about[] =
    "Lists the registered site ops (loaded with --ops before the command): name, site and parameter, "
    "saved-tensor and scratch sizes for the model's shapes. With --check, runs hg_gradcheck_site on "
    "each: its backward against finite differences of its forward, with poisoned outputs and a check "
    "that parameter gradients accumulate. Exit 1 if one fails.\n"
    "The ops get the model's shapes: C = d_model, and at the MLP site the widths (FI, F) of its mlp "
    "(FI = 2F for swiglu and geglu).\n";

typedef struct ops_args {
    cli_shape shape;
    int check, rows;
} ops_args;

static const cli_opt ops_options[] = {
    {"check", CLI_BOOL, offsetof(ops_args, check), 0, 0, 1, 0, "gradient-check every op"},
    CLI_OPTS_MODEL(ops_args, shape.),
    CLI_OPTS_SHAPE(ops_args, shape.),
    {"rows", CLI_INT, offsetof(ops_args, rows), "N", 1, 4096, 0, "rows N of the checked calls"},
};

int cmd_ops(int argc, char **argv) {
    ops_args a = {.shape.model = "tiny", .rows = 8};
    cli_cmd cmd = CLI_CMD("ops", synopsis, about, NULL, ops_options, NULL);
    int rc = cli_parse(&cmd, &a, argc, argv, NULL);
    if (rc) return cli_exit(rc);
    const int check = a.check, rows = a.rows;
    hg_config cfg;
    if (cli_shape_config("ops", &a.shape, &(hg_config){0}, &cfg)) return 2;
    if (hg_config_validate(&cfg) != HG_OK) return cli_fail("ops");
    const int n = hg_op_count();
    if (!n) {
        printf("no site ops are registered (load a plugin with: handgrad --ops PLUGIN.so ops)\n");
        return 0;
    }
    int failed = 0;
    for (int i = 0; i < n; i++) {
        hg_site_op op;
        if (hg_op_at(i, &op) != HG_OK) return cli_fail("ops");
        hg_site_shape s = hg_site_shape_of(&cfg, op.site, rows, 1);
        hg_site_sizes z = {0};
        op.sizes(op.ctx, &s, &z);
        printf("%s at %s (N=%d, %d -> %d): %d parameters", op.name, hg_site_field(op.site), rows, s.in_width,
               s.out_width, op.n_params);
        for (int p = 0; p < op.n_params; p++) {
            printf("%s %s (%lld", p ? "," : "", op.param_name[p], (long long)z.param[p][0]);
            if (z.param[p][1]) printf("x%lld", (long long)z.param[p][1]);
            printf(")");
        }
        printf("; %d saved; scratch %lld bytes\n", op.n_saved, (long long)z.scratch_bytes);
        if (!check) continue;
        hg_gradcheck_report r;
        if (hg_gradcheck_site(&op, &s, NULL, &r) != HG_OK) {
            fprintf(stderr, "handgrad ops: %s\n", hg_last_error());
            failed = 1;
            continue;
        }
        printf("  gradient check: %s (worst relative error: dx %.1e", r.ok ? "ok" : r.summary, r.in[0].err);
        for (int p = 0; p < op.n_params; p++) printf(", d%s %.1e", op.param_name[p], r.in[1 + p].err);
        printf("; finite differences' own %.1e)\n", r.fd_noise);
        failed |= !r.ok;
    }
    return failed;
}
