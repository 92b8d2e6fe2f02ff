/* Hugging Face tokenizer.json: BPE models, byte-level (GPT-2, Llama 3, Qwen2) or
 * sentencepiece-style with byte fallback (Mistral, Llama 2). This file reads the model
 * (vocabulary, merges, added tokens) and puts the tokenizer together; the pipeline
 * around it (normalizer, pre-tokenizer, post-processor's BOS, decoder) is read by
 * tokjson_pipeline.c. Every key that would change the computation and is not run
 * here is refused by name. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/fileio.h"
#include "data/tokjson.h"
#include "data/utf8.h"
#include "data/vocab.h"

/* ------------------------------------------------------------ token text */

static int hex_digit(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* The byte of a byte-fallback token "<0xNN>" (upper-case hex, as the tokenizers
 * package writes it), or -1. */
static int byte_token(const char *s) {
    if (strlen(s) != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* A vocabulary string to token bytes (out has room for n): GPT-2's byte alphabet, or
 * UTF-8 with "▁" as a space. Returns the length, or -1 with *why. */
static long token_decode(const tj *c, const char *s, size_t n, uint8_t *out, const char **why) {
    if (c->byte_level) {
        size_t bad;
        long k = byteunicode_decode(s, n, out, &bad);
        if (k < 0) *why = "a character outside GPT-2's byte alphabet";
        return k;
    }
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] == ' ') {
            *why = "a space in a vocabulary that writes spaces as \"" SPACE_MARK "\"";
            return -1;
        }
        if (i + 3 <= n && !memcmp(s + i, SPACE_MARK, 3)) {
            out[k++] = ' ';
            i += 3;
        } else {
            out[k++] = (uint8_t)s[i++];
        }
    }
    return (long)k;
}

/* ------------------------------------------------------------------ model */

typedef struct vocab_arrays {
    int32_t n;             /* V */
    const char **key;      /* (V) the model.vocab string, or NULL */
    const char **content;  /* (V) an added token's content, or NULL */
    int *added_index;      /* (V) its index in added_tokens, or -1 */
    uint8_t *flags;        /* (V) */
    const uint8_t **bytes; /* (V) */
    uint32_t *lens;
    uint8_t *blob;         /* decoded model tokens */
} vocab_arrays;

static void vocab_arrays_free(vocab_arrays *v) {
    free(v->key);
    free(v->content);
    free(v->added_index);
    free(v->flags);
    free(v->bytes);
    free(v->lens);
    free(v->blob);
}

static hg_status check_model_keys(const tj *c, const cJSON *model, int *ignore_merges, int *fuse_unk) {
    static const char *const keys[] = {"type", "dropout", "unk_token", "continuing_subword_prefix",
                                       "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
                                       "vocab", "merges", NULL};
    HG_TRY(tj_want_object(c, model, "model"));
    const char *type = tj_type_of(model);
    if (!type) return hg_fail(HG_ERR_FORMAT, "%s: model.type: want \"BPE\"", c->name);
    if (strcmp(type, "BPE"))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: model.type: \"%.40s\" is not supported; handgrad reads BPE models only",
                       c->name, type);
    HG_TRY(tj_check_keys(c, model, "model", keys));
    if (!tj_is_null(tj_get(model, "dropout")))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: model.dropout: BPE dropout is not supported (want null)", c->name);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *j = tj_get(model, affixes[i]);
        if (!tj_is_null(j) && !(cJSON_IsString(j) && !*j->valuestring))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: model.%s: not supported (want null)", c->name, affixes[i]);
    }
    HG_TRY(tj_get_bool(c, model, "model", "ignore_merges", 0, ignore_merges));
    HG_TRY(tj_get_bool(c, model, "model", "fuse_unk", 0, fuse_unk));
    return HG_OK;
}

/* Reads model.vocab and added_tokens into per-id arrays. */
static hg_status read_tokens(const tj *c, const cJSON *vocab, const cJSON *added, vocab_arrays *v) {
    if (!cJSON_IsObject(vocab)) return hg_fail(HG_ERR_FORMAT, "%s: model.vocab: want an object of token -> id", c->name);
    if (!tj_is_null(added) && !cJSON_IsArray(added))
        return hg_fail(HG_ERR_FORMAT, "%s: added_tokens: want an array", c->name);
    int32_t max_id = -1, id;
    size_t total = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!tj_json_id(e, &id))
            return hg_fail(HG_ERR_FORMAT, "%s: model.vocab: \"%.60s\": the id must be an integer in [0, 2^30)", c->name,
                           e->string);
        if (id > max_id) max_id = id;
        total += strlen(e->string);
    }
    int i = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, i++) {
        if (!cJSON_IsObject(e) || !tj_json_id(tj_get(e, "id"), &id))
            return hg_fail(HG_ERR_FORMAT, "%s: added_tokens[%d].id: want an integer in [0, 2^30)", c->name, i);
        if (id > max_id) max_id = id;
    }
    if (max_id < 0) return hg_fail(HG_ERR_FORMAT, "%s: model.vocab: empty", c->name);
    /* Every id below V is a token, so V is at most the number of entries: checked
     * before anything of size V is allocated. */
    int entries = cJSON_GetArraySize(vocab) + i;
    if (max_id >= entries) {
        uint8_t *seen = calloc((size_t)entries + 1, 1);
        if (!seen) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", c->name);
        for (const cJSON *e = vocab->child; e; e = e->next)
            if (tj_json_id(e, &id) && id < entries) seen[id] = 1;
        for (const cJSON *e = added ? added->child : NULL; e; e = e->next)
            if (tj_json_id(tj_get(e, "id"), &id) && id < entries) seen[id] = 1;
        int32_t hole = 0;
        while (seen[hole]) hole++;
        free(seen);
        return hg_fail(HG_ERR_FORMAT, "%s: id %d is neither in model.vocab nor in added_tokens (V = %d)", c->name,
                       (int)hole, (int)max_id + 1);
    }
    v->n = max_id + 1;
    size_t n = (size_t)v->n;
    v->key = calloc(n, sizeof *v->key);
    v->content = calloc(n, sizeof *v->content);
    v->added_index = malloc(n * sizeof *v->added_index);
    v->flags = calloc(n, 1);
    v->bytes = calloc(n, sizeof *v->bytes);
    v->lens = calloc(n, sizeof *v->lens);
    v->blob = malloc(total + 1);
    if (!v->key || !v->content || !v->added_index || !v->flags || !v->bytes || !v->lens || !v->blob)
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory for %d tokens", c->name, (int)v->n);
    for (size_t k = 0; k < n; k++) v->added_index[k] = -1;
    size_t used = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        tj_json_id(e, &id);
        if (v->key[id])
            return hg_fail(HG_ERR_FORMAT, "%s: model.vocab: \"%.60s\": id %d is already \"%.60s\"", c->name, e->string,
                           (int)id, v->key[id]);
        v->key[id] = e->string;
        int b = c->byte_fallback && !c->byte_level ? byte_token(e->string) : -1;
        const char *why = "empty";
        long k = b >= 0 ? 1 : token_decode(c, e->string, strlen(e->string), v->blob + used, &why);
        if (b >= 0) v->blob[used] = (uint8_t)b;
        if (k <= 0) return hg_fail(HG_ERR_FORMAT, "%s: model.vocab: \"%.60s\": %s", c->name, e->string, why);
        if (b >= 0) v->flags[id] = TOK_BYTE | TOK_OUTSIDE;
        v->bytes[id] = v->blob + used;
        v->lens[id] = (uint32_t)k;
        used += (size_t)k;
    }
    i = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, i++) {
        static const char *const keys[] = {"id", "content", "single_word", "lstrip", "rstrip", "normalized",
                                           "special", NULL};
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%d]", i);
        HG_TRY(tj_check_keys(c, e, path, keys));
        const char *content = "";
        HG_TRY(tj_get_string(c, e, path, "content", &content));
        if (!*content) return hg_fail(HG_ERR_FORMAT, "%s: %s.content: empty", c->name, path);
        static const char *const rule[] = {"single_word", "lstrip", "rstrip"};
        static const uint8_t rule_flag[] = {TOK_SINGLE_WORD, TOK_LSTRIP, TOK_RSTRIP};
        int special, normalized, flag;
        uint8_t rules = 0;
        for (int r = 0; r < 3; r++) {
            HG_TRY(tj_get_bool(c, e, path, rule[r], 0, &flag));
            if (flag) rules |= rule_flag[r];
        }
        HG_TRY(tj_get_bool(c, e, path, "special", 0, &special));
        HG_TRY(tj_get_bool(c, e, path, "normalized", !special, &normalized));
        tj_json_id(tj_get(e, "id"), &id);
        if (v->added_index[id] >= 0)
            return hg_fail(HG_ERR_FORMAT, "%s: %s.id: %d is already added_tokens[%d]", c->name, path, (int)id,
                           v->added_index[id]);
        if (v->key[id] && strcmp(v->key[id], content))
            return hg_fail(HG_ERR_FORMAT, "%s: %s.id: %d is \"%.60s\" in model.vocab, not \"%.60s\"", c->name, path,
                           (int)id, v->key[id], content);
        v->added_index[id] = i;
        v->content[id] = content;
        v->flags[id] |= TOK_ADDED | rules | (special ? TOK_SPECIAL : 0) | (normalized ? TOK_NORMALIZED : 0);
        if (!v->key[id]) {
            v->flags[id] |= TOK_OUTSIDE;
            v->bytes[id] = (const uint8_t *)content;
            v->lens[id] = (uint32_t)strlen(content);
        }
    }
    for (int32_t k = 0; k < v->n; k++)
        if (!v->key[k] && !v->content[k])
            return hg_fail(HG_ERR_FORMAT, "%s: id %d is neither in model.vocab nor in added_tokens (V = %d)", c->name,
                           (int)k, (int)v->n);
    return HG_OK;
}

/* Checks the decoded tokens against each other once the tables exist. */
static hg_status check_tokens(const tj *c, hg_tokenizer *t, const vocab_arrays *v) {
    uint8_t *scratch = malloc(t->max_token_len + 1);
    size_t longest = 0;
    for (int32_t id = 0; id < v->n; id++)
        if (v->content[id] && strlen(v->content[id]) > longest) longest = strlen(v->content[id]);
    uint8_t *cbuf = malloc(longest + 1);
    hg_status s = scratch && cbuf ? HG_OK : hg_fail(HG_ERR_NOMEM, "%s: out of memory", c->name);
    for (int32_t id = 0; id < v->n && s == HG_OK; id++) {
        if (v->flags[id] & TOK_BYTE) {
            uint8_t b = v->bytes[id][0];
            if (t->byte_id[b] >= 0)
                s = hg_fail(HG_ERR_FORMAT, "%s: model.vocab: \"%s\" is there twice", c->name, v->key[id]);
            t->byte_id[b] = id;
            continue;
        }
        if (!(v->flags[id] & TOK_OUTSIDE)) {
            int32_t holder = bytes_table_get(&t->by_bytes, v->bytes[id], v->lens[id]);
            if (holder != id)
                s = hg_fail(HG_ERR_FORMAT, "%s: model.vocab: \"%.60s\" and \"%.60s\" are the same bytes", c->name,
                            v->key[holder], v->key[id]);
            continue;
        }
        /* An added token whose content is a model token under another id. */
        const char *why;
        long k = token_decode(c, v->content[id], strlen(v->content[id]), cbuf, &why);
        int32_t other = k > 0 ? bytes_table_get(&t->by_bytes, cbuf, (size_t)k) : -1;
        if (other >= 0 && v->key[other] && !strcmp(v->key[other], v->content[id]))
            s = hg_fail(HG_ERR_FORMAT, "%s: added_tokens[%d].id: \"%.60s\" is id %d in model.vocab, not %d", c->name,
                        v->added_index[id], v->content[id], (int)other, (int)id);
    }
    free(scratch);
    free(cbuf);
    return s;
}

/* The contents the added tokens are matched by: in the normalized text of a
 * sentencepiece-style tokenizer, "▁" is a space. */
static hg_status build_added(const tj *c, hg_tokenizer *t, const vocab_arrays *v) {
    const uint8_t **content = calloc((size_t)v->n, sizeof *content);
    uint32_t *clen = calloc((size_t)v->n, sizeof *clen);
    uint8_t **mapped = calloc((size_t)v->n, sizeof *mapped);
    hg_status s = content && clen && mapped ? HG_OK : hg_fail(HG_ERR_NOMEM, "%s: out of memory", c->name);
    for (int32_t id = 0; id < v->n && s == HG_OK; id++) {
        if (!v->content[id]) continue;
        size_t n = strlen(v->content[id]);
        content[id] = (const uint8_t *)v->content[id];
        clen[id] = (uint32_t)n;
        if (!c->byte_level && (v->flags[id] & TOK_NORMALIZED) && strstr(v->content[id], SPACE_MARK)) {
            uint8_t *m = mapped[id] = malloc(n);
            if (!m) {
                s = hg_fail(HG_ERR_NOMEM, "%s: out of memory", c->name);
                break;
            }
            size_t k = 0;
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && !memcmp(v->content[id] + i, SPACE_MARK, 3)) {
                    m[k++] = ' ';
                    i += 3;
                } else {
                    m[k++] = (uint8_t)v->content[id][i++];
                }
            }
            content[id] = m;
            clen[id] = (uint32_t)k;
        }
        if (!(v->flags[id] & TOK_SPECIAL) && memchr(content[id], '\n', clen[id])) t->cut_safe = 0;
    }
    if (s == HG_OK) s = tok_build_added(t, content, clen, c->name);
    for (int32_t id = 0; mapped && id < v->n; id++) free(mapped[id]);
    free(mapped);
    free(content);
    free(clen);
    return s;
}

/* model.merges: "left right" strings or [left, right] pairs, in rank order. */
static hg_status read_merges(const tj *c, hg_tokenizer *t, const cJSON *merges) {
    if (!cJSON_IsArray(merges)) return hg_fail(HG_ERR_FORMAT, "%s: model.merges: want an array", c->name);
    int n = cJSON_GetArraySize(merges);
    tok_merge *m = malloc(((size_t)n + 1) * sizeof *m);
    size_t longest = 0;
    for (const cJSON *e = merges->child; e; e = e->next) {
        size_t k = 0;
        if (cJSON_IsString(e)) k = strlen(e->valuestring);
        else if (cJSON_IsArray(e))
            for (const cJSON *x = e->child; x; x = x->next) k += cJSON_IsString(x) ? strlen(x->valuestring) : 0;
        if (k > longest) longest = k;
    }
    char *joined = malloc(longest + 2);
    uint8_t *bytes = malloc(longest + 2);
    if (!m || !joined || !bytes) {
        free(m);
        free(joined);
        free(bytes);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", c->name);
    }
    hg_status s = HG_OK;
    int r = 0;
    for (const cJSON *e = merges->child; e && s == HG_OK; e = e->next, r++) {
        const char *left, *right;
        size_t ll, rl;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                s = hg_fail(HG_ERR_FORMAT, "%s: model.merges[%d]: \"%.60s\": want two tokens separated by one space",
                            c->name, r, e->valuestring);
                break;
            }
            left = e->valuestring;
            ll = (size_t)(sp - left);
            right = sp + 1;
            rl = strlen(right);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            left = e->child->valuestring;
            right = e->child->next->valuestring;
            ll = strlen(left);
            rl = strlen(right);
        } else {
            s = hg_fail(HG_ERR_FORMAT, "%s: model.merges[%d]: want \"left right\" or [\"left\", \"right\"]", c->name, r);
            break;
        }
        /* The tokenizers package looks up the strings; the byte forms are one to one. */
        int32_t ids[3];
        const char *part[3] = {left, right, joined};
        size_t plen[3] = {ll, rl, ll + rl};
        memcpy(joined, left, ll);
        memcpy(joined + ll, right, rl);
        joined[ll + rl] = 0;
        for (int q = 0; q < 3 && s == HG_OK; q++) {
            int b = -1;
            if (c->byte_fallback && !c->byte_level && plen[q] == 6) {
                char tmp[7];
                memcpy(tmp, part[q], 6);
                tmp[6] = 0;
                b = byte_token(tmp);
            }
            const char *why;
            long k = b >= 0 ? 0 : token_decode(c, part[q], plen[q], bytes, &why);
            ids[q] = b >= 0 ? t->byte_id[b] : k > 0 ? bytes_table_get(&t->by_bytes, bytes, (size_t)k) : -1;
            if (ids[q] < 0)
                s = hg_fail(HG_ERR_FORMAT, "%s: model.merges[%d]: \"%.*s\" is not in model.vocab", c->name, r,
                            (int)(plen[q] > 60 ? 60 : plen[q]), part[q]);
        }
        if (s != HG_OK) break;
        m[r] = (tok_merge){ids[0], ids[1], ids[2]};
    }
    free(joined);
    free(bytes);
    if (s != HG_OK) {
        free(m);
        return s;
    }
    char where[160];
    snprintf(where, sizeof where, "%s: model.merges", c->name);
    s = tok_build_merges(t, m, n, where);
    for (int32_t k = 0; s == HG_OK && k < n; k++) {
        const pair_slot *p = pair_table_get(&t->pairs, m[k].left, m[k].right);
        if (p && p->rank != k)
            s = hg_fail(HG_ERR_FORMAT, "%s: model.merges[%d]: the same pair as model.merges[%d]", c->name, (int)k,
                        (int)p->rank);
    }
    return s;
}

/* ------------------------------------------------------------------ parse */

static hg_status parse_root(tj *c, const cJSON *root, hg_tokenizer **out) {
    static const char *const keys[] = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                       "pre_tokenizer", "post_processor", "decoder", "model", NULL};
    if (!cJSON_IsObject(root)) return hg_fail(HG_ERR_FORMAT, "%s: want a JSON object", c->name);
    HG_TRY(tj_check_keys(c, root, "", keys));
    if (!tj_is_null(tj_get(root, "truncation")))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: truncation: not supported (want null)", c->name);
    if (!tj_is_null(tj_get(root, "padding")))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: padding: not supported (want null)", c->name);
    const cJSON *model = tj_get(root, "model");
    int ignore_merges = 0, fuse_unk = 0;
    HG_TRY(check_model_keys(c, model, &ignore_merges, &fuse_unk));
    HG_TRY(tj_get_bool(c, model, "model", "byte_fallback", 0, &c->byte_fallback));
    /* The pre-tokenizer decides how the vocabulary is written, so it comes first. */
    pretok pre;
    pretok_init_empty(&pre);
    hg_status s = tj_parse_pre_tokenizer(c, &pre, tj_get(root, "pre_tokenizer"));
    vocab_arrays v = {0};
    hg_tokenizer *t = NULL;
    if (s == HG_OK) s = read_tokens(c, tj_get(model, "vocab"), tj_get(root, "added_tokens"), &v);
    if (s == HG_OK) s = tok_create_flags(&t, v.n, v.bytes, v.lens, v.flags, c->byte_level, c->name);
    if (s == HG_OK) {
        pretok_free(&t->pre);
        t->pre = pre;
        pretok_init_empty(&pre);
        t->chars = !c->byte_level;
        t->ignore_merges = (uint8_t)ignore_merges;
        t->fuse_unk = (uint8_t)fuse_unk;
        t->meta_prepend = (uint8_t)c->meta_prepend;
        if (t->chars)
            for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
        s = check_tokens(c, t, &v);
    }
    if (s == HG_OK) s = tj_parse_normalizer(c, t, tj_get(root, "normalizer"), "normalizer");
    if (s == HG_OK && t->chars) {
        if (!c->spaces_marked)
            s = hg_fail(HG_ERR_UNSUPPORTED,
                        "%s: pre_tokenizer: without ByteLevel, handgrad wants spaces written as \"" SPACE_MARK
                        "\" (a normalizer Replace \" \" -> \"" SPACE_MARK "\" or a Metaspace pre_tokenizer)",
                        c->name);
        else /* the internal text, where "▁" is a space as in the tokens' bytes */
            s = norm_add(&t->norm, NORM_REPLACE, SPACE_MARK, 3, " ", 1, c->name);
    }
    if (s == HG_OK) s = build_added(c, t, &v);
    if (s == HG_OK) {
        const cJSON *unk = tj_get(model, "unk_token");
        if (!tj_is_null(unk)) {
            if (!cJSON_IsString(unk)) s = hg_fail(HG_ERR_FORMAT, "%s: model.unk_token: want a string or null", c->name);
            else {
                int32_t id = -1;
                for (int32_t k = 0; k < v.n && id < 0; k++)
                    if (v.key[k] && !strcmp(v.key[k], unk->valuestring)) id = k;
                if (id < 0)
                    s = hg_fail(HG_ERR_FORMAT, "%s: model.unk_token: \"%.60s\" is not in model.vocab", c->name,
                                unk->valuestring);
                t->unk = id;
            }
        }
    }
    if (s == HG_OK) s = read_merges(c, t, tj_get(model, "merges"));
    if (s == HG_OK) s = tj_parse_post_processor(c, t, tj_get(root, "post_processor"), "post_processor");
    if (s == HG_OK) s = tj_parse_decoder(c, tj_get(root, "decoder"));
    if (s == HG_OK) {
        t->strip_space = (uint8_t)c->strip_space;
        int prepends = 0;
        for (int i = 0; i < t->norm.n_steps; i++) prepends |= t->norm.step[i].kind == NORM_PREPEND;
        if (!c->known_patterns || prepends || t->meta_prepend || t->chars) t->cut_safe = 0;
    }
    pretok_free(&pre);
    vocab_arrays_free(&v);
    if (s != HG_OK) {
        hg_tokenizer_free(t);
        return s;
    }
    *out = t;
    return HG_OK;
}

hg_status vocab_parse_tokjson(hg_tokenizer **out, const uint8_t *buf, size_t len, const char *name) {
    *out = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)buf, len, &end, 0);
    if (!root) {
        size_t off = end && end >= (const char *)buf ? (size_t)(end - (const char *)buf) : 0;
        if (off > len) off = len;
        return hg_fail(HG_ERR_FORMAT, "%s:%zu: offset %zu: not valid JSON", name, text_line_of(buf, off), off);
    }
    tj c = {.name = name};
    hg_tokenizer *t = NULL;
    hg_status s = parse_root(&c, root, &t);
    cJSON_Delete(root);
    if (s == HG_OK) {
        t->source = malloc(len ? len : 1);
        if (!t->source) {
            hg_tokenizer_free(t);
            return hg_fail(HG_ERR_NOMEM, "%s: out of memory", name);
        }
        memcpy(t->source, buf, len);
        t->source_len = len;
        *out = t;
    }
    return s;
}

hg_status hg_tokenizer_load_tokjson(hg_tokenizer **out, const char *path) {
    return vocab_load_file(out, path, vocab_parse_tokjson);
}
