/* `handgrad ops`: the site ops that --ops plugins registered, and a gradient check of
 * each (hg_gradcheck_site) on the shapes a model would give it. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_io.h"
#include "cli_model.h"
#include "commands.h"
#include "handgrad_ext.h"

static const char *usage_text =
    "usage: handgrad [--ops PLUGIN.so]... ops [--check] [--model NAME] [--arch F=V,...] [--rows N]\n"
    "\n"
    "Lists the registered site ops (loaded with --ops before the command): name, site and\n"
    "parameter, saved-tensor and scratch sizes for the model's shapes. With --check, runs\n"
    "hg_gradcheck_site on each: its backward against finite differences of its forward, with\n"
    "poisoned outputs and a check that parameter gradients accumulate. Exit 1 if one fails.\n"
    "\n"
    "  --check          gradient-check every op\n"
    "  --model NAME     the preset whose shapes the ops get (default tiny): C = d_model; at the\n"
    "                   MLP site the widths (FI, F) of its mlp (FI = 2F for swiglu)\n"
    "  --arch F=V,...   config fields over the preset (e.g. mlp=swiglu)\n"
    "  --rows N         rows N of the checked calls (default 8)\n";

int cmd_ops(int argc, char **argv) {
    static const struct option opts[] = {{"check", no_argument, 0, 'c'}, {"model", required_argument, 0, 'm'},
                                         {"arch", required_argument, 0, 'a'}, {"rows", required_argument, 0, 'r'},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *preset = "tiny", *arch = NULL;
    int check = 0, rows = 8, c;
    optind = 1, opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'c': check = 1; break;
        case 'm': preset = optarg; break;
        case 'a': arch = optarg; break;
        case 'r':
            rows = (int)strtol(optarg, &end, 10);
            if (*end || rows < 1 || rows > 4096) {
                fprintf(stderr, "handgrad ops: --rows: '%s' must be an integer in [1, 4096]\n", optarg);
                return 2;
            }
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        case ':': fprintf(stderr, "handgrad ops: %s needs a value (see --help)\n", argv[optind - 1]); return 2;
        default: fprintf(stderr, "handgrad ops: unknown option '%s' (see --help)\n", argv[optind - 1]); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "handgrad ops: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    hg_config cfg;
    if (hg_config_preset(preset, &cfg) != HG_OK) return cli_fail("ops");
    if (cli_apply_arch("ops", arch, &cfg)) return 2;
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
