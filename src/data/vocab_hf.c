/* Hugging Face vocabularies: vocab.json (token string -> id, tokens written in GPT-2's
 * byte alphabet) plus merges.txt (one "left right" pair per line, in rank order).
 * Also the load-by-path dispatcher and saving in this format (or the tokenizer.json a
 * tokenizer came from). */
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE /* memmem */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "data/fileio.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "data/vocab.h"

/* The line of "key" in the JSON text, or 0 when it is not found verbatim. */
static size_t json_key_line(const uint8_t *json, size_t len, const char *key) {
    size_t k = strlen(key);
    char *quoted = malloc(k + 3);
    if (!quoted) return 0;
    quoted[0] = '"';
    memcpy(quoted + 1, key, k);
    quoted[k + 1] = '"';
    quoted[k + 2] = 0;
    const uint8_t *at = memmem(json, len, quoted, k + 2);
    free(quoted);
    return at ? text_line_of(json, (size_t)(at - json)) : 0;
}

static hg_status vocab_entry_fail(const uint8_t *json, size_t len, const char *name, const char *key,
                                  const char *what) {
    size_t line = json_key_line(json, len, key);
    if (line) return hg_fail(HG_ERR_FORMAT, "%s:%zu: entry \"%.60s\": %s", name, line, key, what);
    return hg_fail(HG_ERR_FORMAT, "%s: entry \"%.60s\": %s", name, key, what);
}

/* Parses merges.txt into pairs of ids of t. */
static hg_status merges_parse(const hg_tokenizer *t, const uint8_t *buf, size_t len, const char *name,
                              tok_merge **out, int32_t *n_out) {
    size_t max_lines = 1;
    for (size_t i = 0; i < len; i++) max_lines += buf[i] == '\n';
    if (max_lines > INT32_MAX / 2) return hg_fail(HG_ERR_FORMAT, "%s: too many lines", name);
    tok_merge *m = malloc(max_lines * sizeof *m);
    uint8_t *scratch = malloc(2 * (len + 1));
    if (!m || !scratch) {
        free(m);
        free(scratch);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", name);
    }
    int32_t n = 0;
    size_t line = 0;
    hg_status s = HG_OK;
    for (size_t pos = 0; pos < len && s == HG_OK;) {
        line++;
        const uint8_t *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len, start = pos;
        pos = nl ? end + 1 : len;
        if (end > start && buf[end - 1] == '\r') end--;
        if (end == start) continue;
        if (line == 1 && end - start >= 8 && !memcmp(buf + start, "#version", 8)) continue;
        const uint8_t *sp = memchr(buf + start, ' ', end - start);
        if (!sp || sp == buf + start || sp + 1 == buf + end || memchr(sp + 1, ' ', (size_t)(buf + end - sp - 1))) {
            s = hg_fail(HG_ERR_FORMAT, "%s:%zu: want two tokens separated by one space", name, line);
            break;
        }
        size_t mid = (size_t)(sp - buf), bad;
        long ll = byteunicode_decode((const char *)buf + start, mid - start, scratch, &bad);
        long rl = ll < 0 ? -1 : byteunicode_decode((const char *)buf + mid + 1, end - mid - 1, scratch + ll, &bad);
        if (rl < 0) {
            size_t col = (ll < 0 ? 0 : mid + 1 - start) + bad + 1;
            s = hg_fail(HG_ERR_FORMAT, "%s:%zu: column %zu: not a character of GPT-2's byte alphabet", name, line, col);
            break;
        }
        int32_t l = bytes_table_get(&t->by_bytes, scratch, (size_t)ll);
        int32_t r = bytes_table_get(&t->by_bytes, scratch + ll, (size_t)rl);
        int32_t id = bytes_table_get(&t->by_bytes, scratch, (size_t)(ll + rl));
        if (l < 0 || r < 0 || id < 0) {
            const char *which = l < 0 ? "the left token" : r < 0 ? "the right token" : "the merged token";
            s = hg_fail(HG_ERR_FORMAT, "%s:%zu: %s is not in the vocabulary", name, line, which);
            break;
        }
        m[n++] = (tok_merge){l, r, id};
    }
    free(scratch);
    if (s != HG_OK) {
        free(m);
        return s;
    }
    *out = m;
    *n_out = n;
    return HG_OK;
}

hg_status vocab_parse_hf(hg_tokenizer **out, const uint8_t *json, size_t json_len, const char *json_name,
                         const uint8_t *merges, size_t merges_len, const char *merges_name) {
    *out = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)json, json_len, &end, 0);
    if (!root) {
        size_t off = end && end >= (const char *)json ? (size_t)(end - (const char *)json) : 0;
        if (off > json_len) off = json_len;
        return hg_fail(HG_ERR_FORMAT, "%s:%zu: offset %zu: not valid JSON", json_name, text_line_of(json, off), off);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hg_fail(HG_ERR_FORMAT, "%s: want a JSON object of token -> id", json_name);
    }
    size_t n = 0, total = 0;
    for (cJSON *e = root->child; e; e = e->next) {
        n++;
        total += strlen(e->string);
    }
    uint8_t *blob = malloc(total + 1);
    const uint8_t **bytes = calloc(n + 1, sizeof *bytes);
    uint32_t *lens = calloc(n + 1, sizeof *lens);
    const char **key_of = calloc(n + 1, sizeof *key_of);
    hg_tokenizer *t = NULL;
    hg_status s = HG_OK;
    int32_t eot = -1;
    if (!blob || !bytes || !lens || !key_of) {
        s = hg_fail(HG_ERR_NOMEM, "%s: out of memory", json_name);
        goto done;
    }
    size_t used = 0;
    for (cJSON *e = root->child; e; e = e->next) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(v >= 0 && v < (double)n && v == (double)(int64_t)v)) {
            s = vocab_entry_fail(json, json_len, json_name, e->string,
                                 "the id must be an integer in 0..N-1, N the number of entries");
            goto done;
        }
        size_t id = (size_t)v;
        if (key_of[id]) {
            char what[120];
            snprintf(what, sizeof what, "id %zu is already used by \"%.40s\"", id, key_of[id]);
            s = vocab_entry_fail(json, json_len, json_name, e->string, what);
            goto done;
        }
        key_of[id] = e->string;
        size_t klen = strlen(e->string), bad;
        if (!strcmp(e->string, HG_EOT_TEXT)) {
            eot = (int32_t)id;
            memcpy(blob + used, HG_EOT_TEXT, HG_EOT_LEN);
            bytes[id] = blob + used;
            lens[id] = HG_EOT_LEN;
            used += HG_EOT_LEN;
            continue;
        }
        long k = byteunicode_decode(e->string, klen, blob + used, &bad);
        if (k <= 0) {
            s = vocab_entry_fail(json, json_len, json_name, e->string,
                                 k == 0 ? "empty token" : "a character outside GPT-2's byte alphabet");
            goto done;
        }
        bytes[id] = blob + used;
        lens[id] = (uint32_t)k;
        used += (size_t)k;
    }
    s = tok_create(&t, (int32_t)n, bytes, lens, eot, json_name);
    if (s != HG_OK) goto done;
    for (size_t id = 0; id < n; id++) {
        int32_t holder = (int32_t)id == eot ? eot : bytes_table_get(&t->by_bytes, bytes[id], lens[id]);
        if (holder != (int32_t)id) {
            char what[120];
            snprintf(what, sizeof what, "the same bytes as \"%.40s\"", key_of[holder]);
            s = vocab_entry_fail(json, json_len, json_name, key_of[id], what);
            goto done;
        }
    }
    tok_merge *m = NULL;
    int32_t n_merges = 0;
    s = merges_parse(t, merges, merges_len, merges_name, &m, &n_merges);
    if (s == HG_OK) s = tok_build_merges(t, m, n_merges, merges_name);
done:
    if (s != HG_OK) {
        hg_tokenizer_free(t);
        t = NULL;
    }
    cJSON_Delete(root);
    free(blob);
    free(bytes);
    free(lens);
    free(key_of);
    *out = t;
    return s;
}

hg_status hg_tokenizer_load_hf(hg_tokenizer **out, const char *vocab_json, const char *merges_txt) {
    *out = NULL;
    uint8_t *json, *merges;
    size_t jl, ml;
    HG_TRY(file_read_all(vocab_json, &json, &jl));
    hg_status s = file_read_all(merges_txt, &merges, &ml);
    if (s == HG_OK) {
        s = vocab_parse_hf(out, json, jl, vocab_json, merges, ml, merges_txt);
        free(merges);
    }
    free(json);
    return s;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

hg_status vocab_load_file(hg_tokenizer **out, const char *path, vocab_parse_fn *parse) {
    *out = NULL;
    uint8_t *buf;
    size_t len;
    HG_TRY(file_read_all(path, &buf, &len));
    hg_status s = parse(out, buf, len, path);
    free(buf);
    return s;
}

hg_status hg_tokenizer_load(hg_tokenizer **out, const char *path) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return hg_fail(HG_ERR_IO, "%s: no such file or folder", path);
    if (ends_with(path, ".tiktoken")) return hg_tokenizer_load_tiktoken(out, path);
    if (!S_ISDIR(st.st_mode) && ends_with(path, "tokenizer.json")) return hg_tokenizer_load_tokjson(out, path);
    size_t n = strlen(path);
    char *vocab = malloc(n + 16), *merges = malloc(n + 16);
    if (!vocab || !merges) {
        free(vocab);
        free(merges);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    }
    hg_status s;
    if (S_ISDIR(st.st_mode)) {
        snprintf(vocab, n + 16, "%s/tokenizer.json", path);
        if (stat(vocab, &st) == 0) {
            s = hg_tokenizer_load_tokjson(out, vocab);
        } else {
            snprintf(vocab, n + 16, "%s/vocab.json", path);
            snprintf(merges, n + 16, "%s/merges.txt", path);
            s = hg_tokenizer_load_hf(out, vocab, merges);
        }
    } else if (ends_with(path, ".json")) {
        const char *slash = strrchr(path, '/');
        size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
        snprintf(merges, n + 16, "%.*smerges.txt", (int)dir, path);
        s = hg_tokenizer_load_hf(out, path, merges);
    } else {
        s = hg_fail(HG_ERR_INVALID,
                    "%s: not a .tiktoken file, a tokenizer.json, a vocab.json or a folder with tokenizer.json or "
                    "vocab.json and merges.txt",
                    path);
    }
    free(vocab);
    free(merges);
    return s;
}

/* ------------------------------------------------------------------ save */

/* Merges of a tiktoken vocabulary: each token of two or more bytes is the pair its
 * own bytes reduce to under the merges of lower rank. */
static hg_status merges_from_ranks(const hg_tokenizer *t, tok_merge **out, int32_t *n_out, const char *dir) {
    tok_merge *m = malloc((size_t)t->n_vocab * sizeof *m);
    int32_t *ids = malloc((t->max_token_len + 1) * sizeof *ids);
    if (!m || !ids) {
        free(m);
        free(ids);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", dir);
    }
    int32_t n = 0;
    hg_status s = HG_OK;
    for (int32_t id = 0; id < t->n_vocab && s == HG_OK; id++) {
        size_t len = t->off[id + 1] - t->off[id], k;
        if ((t->flags[id] & TOK_OUTSIDE) || len < 2) continue;
        for (size_t i = 0; i < len; i++) ids[i] = t->byte_id[t->blob[t->off[id] + i]];
        if (len <= BPE_SMALL_MAX) k = bpe_merge_small(t, ids, len, id);
        else s = bpe_merge_large(t, ids, len, id, &k);
        if (s == HG_OK && k != 2)
            s = hg_fail(HG_ERR_UNSUPPORTED,
                        "%s: token %d is not a merge of two tokens of lower rank, so merges.txt cannot express it",
                        dir, (int)id);
        if (s == HG_OK) m[n++] = (tok_merge){ids[0], ids[1], id};
    }
    free(ids);
    if (s != HG_OK) {
        free(m);
        return s;
    }
    *out = m;
    *n_out = n;
    return HG_OK;
}

static hg_status save_vocab_json(const hg_tokenizer *t, const char *path) {
    cJSON *root = cJSON_CreateObject();
    char *key = malloc(2 * t->max_token_len + 1);
    hg_status s = HG_OK;
    for (int32_t id = 0; root && key && id < t->n_vocab; id++) {
        size_t k = id == t->eot ? (memcpy(key, HG_EOT_TEXT, HG_EOT_LEN), (size_t)HG_EOT_LEN)
                                : byteunicode_encode(t->blob + t->off[id], t->off[id + 1] - t->off[id], key);
        key[k] = 0;
        if (!cJSON_AddNumberToObject(root, key, id)) break;
    }
    char *text = root && key ? cJSON_PrintUnformatted(root) : NULL;
    if (!text) s = hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    else s = file_write_all(path, text, strlen(text));
    cJSON_free(text);
    cJSON_Delete(root);
    free(key);
    return s;
}

static hg_status save_merges_txt(const hg_tokenizer *t, const tok_merge *m, int32_t n, const char *path) {
    size_t cap = 32 + (size_t)n * (4 * t->max_token_len + 2);
    char *text = malloc(cap);
    if (!text) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    size_t o = (size_t)snprintf(text, cap, "#version: 0.2\n");
    for (int32_t i = 0; i < n; i++) {
        o += byteunicode_encode(t->blob + t->off[m[i].left], t->off[m[i].left + 1] - t->off[m[i].left], text + o);
        text[o++] = ' ';
        o += byteunicode_encode(t->blob + t->off[m[i].right], t->off[m[i].right + 1] - t->off[m[i].right], text + o);
        text[o++] = '\n';
    }
    hg_status s = file_write_all(path, text, o);
    free(text);
    return s;
}

hg_status hg_tokenizer_save_hf(const hg_tokenizer *t, const char *dir) {
    size_t n = strlen(dir) + 16;
    if (t->source) {
        char *path = malloc(n);
        if (!path) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", dir);
        snprintf(path, n, "%s/tokenizer.json", dir);
        hg_status s = file_write_all(path, t->source, t->source_len);
        free(path);
        return s;
    }
    char *vocab = malloc(n), *merges = malloc(n);
    tok_merge *derived = NULL;
    const tok_merge *m = t->merges;
    int32_t n_merges = t->n_merges;
    hg_status s = vocab && merges ? HG_OK : hg_fail(HG_ERR_NOMEM, "%s: out of memory", dir);
    if (s == HG_OK && t->mode == TOK_MODE_RANKS) {
        s = merges_from_ranks(t, &derived, &n_merges, dir);
        m = derived;
    }
    if (s == HG_OK) {
        snprintf(vocab, n, "%s/vocab.json", dir);
        snprintf(merges, n, "%s/merges.txt", dir);
        s = save_vocab_json(t, vocab);
    }
    if (s == HG_OK) s = save_merges_txt(t, m, n_merges, merges);
    free(derived);
    free(vocab);
    free(merges);
    return s;
}
