/* Data preparation: input text files -> documents -> tokens -> train and val shards.
 *
 * The inputs are mapped, cut into documents (each file, split at literal markers: the
 * separator token's text, "<|endoftext|>" by default) and documents into work units.
 * Units are encoded in parallel, a batch at a time, and written in input order, so the
 * shards do not depend on the thread count. Every document starts with the separator
 * token. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "data/fileio.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"

hg_prepare_options hg_prepare_options_default(void) {
    return (hg_prepare_options){.val_fraction = 0.05, .shard_tokens = 100000000, .threads = 0};
}

typedef struct prep_input {
    const char *path;
    const uint8_t *data;
    size_t len;
} prep_input;

/* The document separator: the token every document starts with, and its text, which
 * splits documents inside a file. */
typedef struct prep_sep {
    int32_t id;
    const uint8_t *text;
    size_t len;
} prep_sep;

typedef struct prep_unit {
    int file;
    size_t start, end;
    int doc_start; /* begins a document: gets the separator token first */
    int val;
} prep_unit;

typedef struct prep_units {
    prep_unit *u;
    size_t n, cap;
} prep_units;

static int units_push(prep_units *us, prep_unit u) {
    if (us->n == us->cap) {
        size_t cap = us->cap ? 2 * us->cap : 256;
        prep_unit *p = realloc(us->u, cap * sizeof *p);
        if (!p) return 0;
        us->u = p;
        us->cap = cap;
    }
    us->u[us->n++] = u;
    return 1;
}

static int ascii_graph(uint8_t c) { return c > 0x20 && c < 0x7F; }

/* Cuts document [s, e) of file f into units of about unit_bytes, where the tokenizer
 * allows (tok->cut_safe: its pieces never cross such a cut; otherwise a document is
 * one unit). */
static int units_add_doc(prep_units *us, const prep_input *in, int f, size_t s, size_t e, int val,
                         size_t unit_bytes) {
    const uint8_t *d = in[f].data;
    int first = 1;
    while (s < e) {
        size_t cut = e;
        if (e - s > unit_bytes && unit_bytes) {
            for (size_t q = s + unit_bytes / 2 + 2; q < e; q++) {
                if (d[q - 1] == '\n' && ascii_graph(d[q - 2]) && ascii_graph(d[q])) {
                    cut = q;
                    break;
                }
            }
        }
        if (!units_push(us, (prep_unit){f, s, cut, first, val})) return 0;
        first = 0;
        s = cut;
    }
    return 1;
}

/* Splits [s, e) of file f at the separator's text into documents. */
static int units_add_segment(prep_units *us, const prep_input *in, int f, size_t s, size_t e, int val,
                             size_t unit_bytes, const prep_sep *sep, uint64_t *docs) {
    const uint8_t *d = in[f].data;
    while (s < e) {
        const uint8_t *m = memmem(d + s, e - s, sep->text, sep->len);
        size_t doc_end = m ? (size_t)(m - d) : e;
        if (doc_end > s) {
            if (!units_add_doc(us, in, f, s, doc_end, val, unit_bytes)) return 0;
            (*docs)++;
        }
        s = m ? doc_end + sep->len : e;
    }
    return 1;
}

/* Where val starts: the first line start at or after (1 - fraction) of the bytes (a
 * file's first byte is a line start). Returns the file in *cut_file (n when val is
 * empty: no line starts there) and the offset in *cut_off. */
static void prepare_val_cut(const prep_input *in, int n, uint64_t total, double fraction, int *cut_file,
                            size_t *cut_off) {
    *cut_file = n;
    *cut_off = 0;
    if (fraction <= 0) return;
    uint64_t p = (uint64_t)((1.0 - fraction) * (double)total);
    int f = 0;
    while (f < n && p >= in[f].len) p -= in[f++].len;
    for (int g = f; g < n; g++) {
        size_t o = g == f ? (size_t)p : 0;
        if (o == 0 && in[g].len) {
            *cut_file = g;
            return;
        }
        const uint8_t *nl = o < in[g].len ? memchr(in[g].data + o - 1, '\n', in[g].len - o + 1) : NULL;
        if (nl && (size_t)(nl - in[g].data) + 1 < in[g].len) {
            *cut_file = g;
            *cut_off = (size_t)(nl - in[g].data) + 1;
            return;
        }
    }
}

hg_status prep_out_write(prep_out *o, const int32_t *ids, const uint8_t *flags, size_t n, int whole) {
    if (whole && o->open && o->w.count > 0 && o->w.count + n > o->shard_tokens) {
        o->open = 0;
        HG_TRY(shard_writer_close(&o->w));
    }
    while (n) {
        if (!o->open) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s_%06d.bin", o->dir, o->split, o->n_shards);
            HG_TRY(shard_writer_open(&o->w, path, hg_tokenizer_vocab_size(o->tok), o->sep, o->with_flags));
            o->open = 1;
            o->n_shards++;
        }
        uint64_t room = o->shard_tokens - o->w.count;
        size_t k = n < room || (whole && o->w.count == 0) ? n : (size_t)room;
        HG_TRY(shard_writer_write(&o->w, ids, flags, k));
        o->tokens += k;
        ids += k;
        flags = flags ? flags + k : NULL;
        n -= k;
        if (o->w.count >= o->shard_tokens) {
            o->open = 0;
            HG_TRY(shard_writer_close(&o->w));
        }
    }
    return HG_OK;
}

/* Closes the last shard and removes shards of the same split left by an earlier run. */
hg_status prep_out_finish(prep_out *o) {
    if (o->open) {
        o->open = 0;
        HG_TRY(shard_writer_close(&o->w));
    }
    for (int k = o->n_shards;; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", o->dir, o->split, k);
        if (access(path, F_OK) != 0 || remove(path) != 0) break;
    }
    return HG_OK;
}

/* Encodes units [a, b) in parallel into ids (each unit at ids + at[u]). */
static hg_status encode_batch(const hg_tokenizer *tok, int32_t sep, const prep_input *in, const prep_unit *u,
                              size_t a, size_t b, int32_t *ids, const size_t *at, size_t *count, int threads) {
    hg_status first = HG_OK;
    char msg[1024] = "";
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (size_t i = a; i < b; i++) {
        int32_t *out = ids + at[i - a];
        size_t k = 0, pre = u[i].doc_start ? 1 : 0;
        if (pre) out[0] = sep;
        const uint8_t *text = in[u[i].file].data + u[i].start;
        size_t len = u[i].end - u[i].start;
        hg_status s = hg_tokenizer_encode(tok, text, len, 0, out + pre, hg_tokenizer_max_ids(tok, len), &k);
        count[i - a] = pre + k;
        if (s != HG_OK) {
#pragma omp critical(prepare_error)
            if (first == HG_OK) {
                first = s;
                snprintf(msg, sizeof msg, "%s: offset %zu: %s", in[u[i].file].path, u[i].start, hg_last_error());
            }
        }
    }
    return first == HG_OK ? HG_OK : hg_fail(first, "%s", msg);
}

static hg_status prepare_run(const hg_tokenizer *tok, int32_t sep, const prep_input *in, const prep_units *us,
                             const hg_prepare_options *opt, uint64_t total, hg_prepare_stats *stats) {
    int threads = opt->threads > 0 ? opt->threads : omp_get_max_threads();
    prep_out outs[2] = {{.dir = opt->out_dir, .split = "train", .tok = tok, .sep = sep, .shard_tokens = opt->shard_tokens},
                        {.dir = opt->out_dir, .split = "val", .tok = tok, .sep = sep, .shard_tokens = opt->shard_tokens}};
    size_t batch_bytes = (size_t)threads * (8u << 20), cap = 0;
    int32_t *ids = NULL;
    size_t *at = NULL, *count = NULL;
    uint64_t done = 0;
    hg_status s = HG_OK;
    for (size_t a = 0; a < us->n && s == HG_OK;) {
        size_t b = a, need = 0;
        while (b < us->n && (b == a || (need < batch_bytes && b - a < 4096))) {
            need += hg_tokenizer_max_ids(tok, us->u[b].end - us->u[b].start) + 1;
            b++;
        }
        if (need > cap || !at) {
            free(ids);
            free(at);
            free(count);
            cap = need > cap ? need : cap;
            ids = malloc(cap * sizeof *ids);
            at = malloc(4096 * sizeof *at);
            count = malloc(4096 * sizeof *count);
            if (!ids || !at || !count) {
                s = hg_fail(HG_ERR_NOMEM, "prepare: out of memory for %zu tokens", cap);
                break;
            }
        }
        size_t o = 0;
        for (size_t i = a; i < b; i++) {
            at[i - a] = o;
            o += hg_tokenizer_max_ids(tok, us->u[i].end - us->u[i].start) + 1;
        }
        s = encode_batch(tok, sep, in, us->u, a, b, ids, at, count, threads);
        for (size_t i = a; i < b && s == HG_OK; i++) {
            s = prep_out_write(&outs[us->u[i].val], ids + at[i - a], NULL, count[i - a], 0);
            done += us->u[i].end - us->u[i].start;
        }
        if (s == HG_OK && opt->progress)
            opt->progress(opt->progress_ctx, done, total, outs[0].tokens + outs[1].tokens);
        a = b;
    }
    for (int k = 0; k < 2; k++) {
        if (s == HG_OK) s = prep_out_finish(&outs[k]);
        else if (outs[k].open) shard_writer_abort(&outs[k].w);
    }
    stats->train_tokens = outs[0].tokens;
    stats->val_tokens = outs[1].tokens;
    stats->train_shards = outs[0].n_shards;
    stats->val_shards = outs[1].n_shards;
    free(ids);
    free(at);
    free(count);
    return s;
}

/* The separator named in opt, else <|endoftext|>, else the tokenizer's BOS. */
static hg_status prepare_separator(const hg_tokenizer *tok, const hg_prepare_options *opt, prep_sep *sep) {
    if (opt->separator) {
        if (!*opt->separator) return hg_fail(HG_ERR_INVALID, "separator: empty");
        if (hg_tokenizer_token_id(tok, opt->separator, &sep->id) != HG_OK)
            return hg_fail(HG_ERR_INVALID, "separator: \"%.80s\" is not a token of the tokenizer", opt->separator);
    } else {
        sep->id = tok->eot >= 0 ? tok->eot : tok->bos;
        if (sep->id < 0)
            return hg_fail(HG_ERR_INVALID, "separator: the tokenizer has neither <|endoftext|> nor a BOS token; "
                                           "name the token that starts each document");
    }
    return hg_tokenizer_token_bytes(tok, sep->id, &sep->text, &sep->len);
}

hg_status prepare_check(int n_inputs, const hg_prepare_options *opt) {
    if (!opt->out_dir || !*opt->out_dir) return hg_fail(HG_ERR_INVALID, "out_dir: not given");
    if (!(opt->val_fraction >= 0 && opt->val_fraction < 1))
        return hg_fail(HG_ERR_INVALID, "val_fraction: %g; must be in [0, 1)", opt->val_fraction);
    if (opt->shard_tokens < 1) return hg_fail(HG_ERR_INVALID, "shard_tokens: must be >= 1");
    if (n_inputs < 1) return hg_fail(HG_ERR_INVALID, "inputs: no input files given");
    if (mkdir(opt->out_dir, 0777) != 0 && errno != EEXIST)
        return hg_fail(HG_ERR_IO, "%s: cannot create the folder: %s", opt->out_dir, strerror(errno));
    return HG_OK;
}

hg_status prepare_files_units(const hg_tokenizer *tok, const char *const *inputs, int n_inputs,
                              const hg_prepare_options *opt, size_t unit_bytes, hg_prepare_stats *stats) {
    memset(stats, 0, sizeof *stats);
    prep_sep sep;
    HG_TRY(prepare_separator(tok, opt, &sep));
    HG_TRY(prepare_check(n_inputs, opt));
    prep_input *in = calloc((size_t)n_inputs, sizeof *in);
    prep_units us = {0};
    if (!in) return hg_fail(HG_ERR_NOMEM, "prepare: out of memory");
    hg_status s = HG_OK;
    uint64_t total = 0;
    int mapped = 0;
    for (; mapped < n_inputs && s == HG_OK; mapped++) {
        in[mapped].path = inputs[mapped];
        s = file_map(inputs[mapped], &in[mapped].data, &in[mapped].len);
        total += in[mapped].len;
    }
    int cut_file = n_inputs;
    size_t cut_off = 0;
    if (!tok->cut_safe) unit_bytes = 0;
    if (s == HG_OK) prepare_val_cut(in, n_inputs, total, opt->val_fraction, &cut_file, &cut_off);
    for (int f = 0; f < n_inputs && s == HG_OK; f++) {
        size_t mid = f < cut_file ? in[f].len : f == cut_file ? cut_off : 0;
        if (!units_add_segment(&us, in, f, 0, mid, 0, unit_bytes, &sep, &stats->documents) ||
            !units_add_segment(&us, in, f, mid, in[f].len, 1, unit_bytes, &sep, &stats->documents))
            s = hg_fail(HG_ERR_NOMEM, "prepare: out of memory");
    }
    if (s == HG_OK && us.n == 0)
        s = hg_fail(HG_ERR_INVALID, "%s%s: empty corpus: %llu bytes and no text outside %.*s markers", inputs[0],
                    n_inputs > 1 ? " and the other inputs" : "", (unsigned long long)total, (int)sep.len, sep.text);
    stats->bytes = total;
    if (s == HG_OK) s = prepare_run(tok, sep.id, in, &us, opt, total, stats);
    for (int f = 0; f < mapped; f++) file_unmap(in[f].data, in[f].len);
    free(in);
    free(us.u);
    return s;
}

hg_status hg_prepare_files(const hg_tokenizer *tok, const char *const *inputs, int n_inputs,
                           const hg_prepare_options *opt, hg_prepare_stats *stats) {
    return prepare_files_units(tok, inputs, n_inputs, opt, PREPARE_UNIT_BYTES, stats);
}
