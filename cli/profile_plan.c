/* handgrad profile --plan: the step as the model planned it (hg_step_op_at): the ops of
 * one pass in order, with the buffers each reads and writes, and what the plan derived
 * from them: each buffer's copies, bytes, and whether it is kept for the backward. */
#include <stdio.h>
#include <string.h>

#include "profile.h"

/* " name[copy]" for each access into buf; the copy only for a per-block buffer. */
static void accesses(char *buf, size_t cap, const hg_model *m, const hg_step_access *a, int n) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < n && at < cap; i++) {
        hg_buffer_info b;
        if (hg_buffer_at(m, a[i].buffer, &b) != HG_OK) continue;
        if (b.copies > 1 || a[i].copy) at += (size_t)snprintf(buf + at, cap - at, " %s[%d]", b.name, a[i].copy);
        else at += (size_t)snprintf(buf + at, cap - at, " %s", b.name);
    }
}

/* Shown: the ops outside the blocks, and blocks 0 and L-1 (the others repeat block 0's,
 * with their own copies). */
static int shown(int layer, int L) { return layer < 1 || layer >= L - 1; }

int profile_plan(const hg_model *m, FILE *f) {
    const hg_options *o = hg_model_options(m);
    const int L = hg_model_config(m)->n_layer, pass = o->training ? 0 : 1;
    static const char *const modes[] = {"none", "attn", "mlp", "block"};
    fprintf(f, "The %s as planned (B=%d, T=%d, %s, recompute %s): each op in the order the step runs it, what it "
               "reads and what it writes",
            pass ? "forward" : "training step", o->batch, o->seq_len,
            o->precision == HG_PRECISION_BF16 ? "bf16" : "fp32", modes[o->recompute]);
    fprintf(f, L > 2 ? "; blocks 1..%d repeat block 0\n" : "\n", L - 2);
    const char *region = "";
    char rd[512], wr[512], where[32], name[96];
    for (int i = 0; i < hg_step_op_count(m); i++) {
        hg_step_op op;
        if (hg_step_op_at(m, i, &op) != HG_OK) return 1;
        if (op.pass != pass || !shown(op.layer, L)) continue;
        if (strcmp(region, op.region)) fprintf(f, "  %s\n", region = op.region);
        profile_layer_name(where, sizeof where, op.layer, L);
        accesses(rd, sizeof rd, m, op.read, op.nread);
        accesses(wr, sizeof wr, m, op.write, op.nwrite);
        snprintf(name, sizeof name, "%s%s", op.name, op.recompute ? " (recompute)" : "");
        fprintf(f, "    %-10s %-40s reads%s; writes%s\n", where, name, rd, wr);
    }
    fprintf(f, "\nBuffers the plan derived from it: kept for the backward (or held between calls), or scratch\n");
    fprintf(f, "  %-24s %8s %12s  %s\n", "buffer", "copies", "MiB", "");
    for (int i = 0; i < hg_buffer_count(m); i++) {
        hg_buffer_info b;
        if (hg_buffer_at(m, i, &b) != HG_OK) return 1;
        if (!b.bytes) continue;
        fprintf(f, "  %-24s %8lld %12.3f  %s\n", b.name, (long long)b.copies, b.bytes / 1048576.0,
                b.scratch ? "scratch" : "kept");
    }
    hg_memory_plan p = hg_model_memory(m);
    fprintf(f, "  activations kept %.3f MiB, scratch %.3f MiB\n", p.activations / 1048576.0, p.scratch / 1048576.0);
    return 0;
}
