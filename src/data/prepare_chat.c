/* Chat data into token shards with a loss mask (hg_prepare_chat): JSONL records
 * rendered with the model's chat template (data/chat_template.h), encoded, and each
 * token flagged with whether the loss is on it and whether a record starts there. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/fileio.h"
#include "data/prepare.h"

/* ---- the template and its tokens, from tokenizer_config.json ---- */

/* A record's tokens and their flags, grown as needed. */
typedef struct rec_buf {
    int32_t *ids, *scratch;
    uint8_t *flags;
    size_t n, cap, scratch_cap;
} rec_buf;

struct prep_chat {
    const hg_tokenizer *tok;
    hg_chat_template *tmpl;
    char *bos, *eos;    /* bos_token, eos_token: their text, or NULL */
    int32_t eos_id;     /* eos_token's id, or -1 (none, or not a token: prompt/completion refused) */
    char source[4096];  /* the config's name in messages (tmpl NULL: it has no chat_template) */
    const char *date;   /* date_string, or NULL */
    rec_buf r;
};

/* A special token of the config: a string, or an object whose "content" is one. */
static hg_status token_text(const cJSON *v, const char *path, const char *key, char **out) {
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return HG_OK;
    const cJSON *c = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "content") : v;
    if (!cJSON_IsString(c)) return hg_fail(HG_ERR_FORMAT, "%s: %s is neither a string nor {\"content\": string}", path, key);
    if (!(*out = strdup(c->valuestring))) return hg_fail(HG_ERR_NOMEM, "out of memory");
    return HG_OK;
}

void prep_chat_free(prep_chat *c) {
    if (!c) return;
    hg_chat_template_free(c->tmpl);
    free(c->bos), free(c->eos);
    free(c->r.ids), free(c->r.scratch), free(c->r.flags);
    free(c);
}

hg_status prep_chat_create(prep_chat **out, const hg_tokenizer *tok, const char *tmpl, const char *bos, const char *eos,
                           const char *source) {
    *out = NULL;
    prep_chat *c = calloc(1, sizeof *c);
    if (!c) return hg_fail(HG_ERR_NOMEM, "out of memory");
    c->tok = tok, c->eos_id = -1;
    char where[4200];
    snprintf(c->source, sizeof c->source, "%s", source);
    snprintf(where, sizeof where, "%s chat_template", source);
    hg_status s = tmpl ? hg_chat_template_compile(tmpl, strlen(tmpl), where, &c->tmpl) : HG_OK;
    if (s == HG_OK && ((bos && !(c->bos = strdup(bos))) || (eos && !(c->eos = strdup(eos)))))
        s = hg_fail(HG_ERR_NOMEM, "out of memory");
    if (s == HG_OK && c->eos && hg_tokenizer_token_id(tok, c->eos, &c->eos_id) != HG_OK) c->eos_id = -1;
    if (s != HG_OK) {
        prep_chat_free(c);
        return s;
    }
    *out = c;
    return HG_OK;
}

void prep_chat_date(prep_chat *c, const char *date_string) { c->date = date_string; }

/* The template, bos_token and eos_token of a tokenizer_config.json. */
static hg_status setup_load(prep_chat **out, const hg_tokenizer *tok, const char *path) {
    size_t len;
    uint8_t *text = NULL;
    HG_TRY(file_read_all(path, &text, &len));
    cJSON *root = cJSON_ParseWithLength((const char *)text, len);
    free(text);
    if (!root) return hg_fail(HG_ERR_FORMAT, "%s: not valid JSON", path);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsArray(t)) { /* named templates: the default one */
        const cJSON *e, *pick = NULL;
        cJSON_ArrayForEach(e, t) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(n) && !strcmp(n->valuestring, "default")) pick = cJSON_GetObjectItemCaseSensitive(e, "template");
        }
        t = pick;
    }
    char *bos = NULL, *eos = NULL;
    hg_status s = token_text(cJSON_GetObjectItemCaseSensitive(root, "bos_token"), path, "bos_token", &bos);
    if (s == HG_OK) s = token_text(cJSON_GetObjectItemCaseSensitive(root, "eos_token"), path, "eos_token", &eos);
    if (s == HG_OK) s = prep_chat_create(out, tok, cJSON_IsString(t) ? t->valuestring : NULL, bos, eos, path);
    free(bos), free(eos);
    cJSON_Delete(root);
    return s;
}

/* ---- one record ---- */

static int reserve(int32_t **p, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    int32_t *q = realloc(*p, need * sizeof *q);
    if (!q) return 0;
    *p = q, *cap = need;
    return 1;
}

/* Room for `extra` more tokens and flags (cap counts what both hold). */
static hg_status grow(rec_buf *r, size_t extra) {
    if (r->n + extra <= r->cap) return HG_OK;
    const size_t cap = r->n + extra;
    uint8_t *f = realloc(r->flags, cap);
    if (f) r->flags = f;
    if (!f || !reserve(&r->ids, &r->cap, cap)) return hg_fail(HG_ERR_NOMEM, "out of memory");
    return HG_OK;
}

/* Appends the encoding of len bytes of text (special tokens' text becomes their ids). */
static hg_status append_text(rec_buf *r, const hg_tokenizer *tok, const char *text, size_t len, int train) {
    size_t cap = hg_tokenizer_max_ids(tok, len), k = 0;
    HG_TRY(grow(r, cap + 1));
    HG_TRY(hg_tokenizer_encode(tok, text, len, HG_ENCODE_ALLOW_SPECIAL, r->ids + r->n, cap, &k));
    memset(r->flags + r->n, train ? HG_TOKEN_TRAIN : 0, k);
    r->n += k;
    return HG_OK;
}

static hg_status append_id(rec_buf *r, int32_t id, int train) {
    HG_TRY(grow(r, 1));
    r->ids[r->n] = id, r->flags[r->n] = train ? HG_TOKEN_TRAIN : 0;
    r->n++;
    return HG_OK;
}

/* The index of the token where text[0, at) ends in ids (the encoding of all of text):
 * the count of text[0, at)'s own ids, which must be their prefix. */
static hg_status boundary(rec_buf *r, const hg_tokenizer *tok, const char *text, size_t at, size_t *out) {
    size_t cap = hg_tokenizer_max_ids(tok, at), k = 0;
    if (!reserve(&r->scratch, &r->scratch_cap, cap + 1)) return hg_fail(HG_ERR_NOMEM, "out of memory");
    HG_TRY(hg_tokenizer_encode(tok, text, at, HG_ENCODE_ALLOW_SPECIAL, r->scratch, cap, &k));
    if (k > r->n || memcmp(r->scratch, r->ids, k * sizeof *r->ids))
        return hg_fail(HG_ERR_UNSUPPORTED, "a token of the rendered text spans the start or end of an assistant "
                       "message, so its loss mask is not a whole number of tokens");
    *out = k;
    return HG_OK;
}

static const char *const roles[] = {"system", "user", "assistant"};

/* The messages of a record, checked: an array of objects with a known role and a
 * string content. *msgs is malloc'd (n of them), pointing into the JSON. */
static hg_status read_messages(const cJSON *arr, hg_chat_msg **msgs, int *n) {
    *msgs = NULL, *n = 0;
    if (!cJSON_IsArray(arr)) return hg_fail(HG_ERR_FORMAT, "messages: not an array");
    int count = cJSON_GetArraySize(arr);
    if (count == 0) return hg_fail(HG_ERR_FORMAT, "messages: empty");
    hg_chat_msg *m = calloc((size_t)count, sizeof *m);
    if (!m) return hg_fail(HG_ERR_NOMEM, "out of memory");
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role"), *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        hg_status s = HG_OK;
        if (!cJSON_IsObject(e)) s = hg_fail(HG_ERR_FORMAT, "messages[%d]: not an object", i);
        else if (!cJSON_IsString(role)) s = hg_fail(HG_ERR_FORMAT, "messages[%d].role: missing or not a string", i);
        else if (!cJSON_IsString(content)) s = hg_fail(HG_ERR_FORMAT, "messages[%d].content: missing or not a string", i);
        int known = 0;
        for (int k = 0; s == HG_OK && k < 3; k++) known |= !strcmp(role->valuestring, roles[k]);
        if (s == HG_OK && !known)
            s = hg_fail(HG_ERR_FORMAT, "messages[%d].role: \"%.40s\" is not system, user or assistant", i, role->valuestring);
        if (s != HG_OK) {
            free(m);
            return s;
        }
        m[i].role = role->valuestring, m[i].content = content->valuestring;
        i++;
    }
    *msgs = m, *n = count;
    return HG_OK;
}

static hg_status render(const prep_chat *c, const hg_chat_msg *m, int n, int gen, char **out, size_t *len) {
    if (!c->tmpl)
        return hg_fail(HG_ERR_FORMAT, "%s has no chat_template (or no \"default\" one) to render the messages with",
                       c->source);
    hg_chat_vars v = {.bos_token = c->bos, .eos_token = c->eos, .add_generation_prompt = gen, .date_string = c->date};
    return hg_chat_template_render(c->tmpl, m, n, &v, out, len);
}

/* A conversation: rendered whole, encoded, and the tokens of the assistant messages the
 * loss is on flagged. Message i's text is what rendering messages [0, i] adds to
 * rendering [0, i) with the generation prompt, as far as it agrees with the whole (Phi-3.5
 * ends a conversation with <|endoftext|>, which a middle message does not have); the
 * rendering up to it must start the whole. */
static hg_status conversation(rec_buf *r, const hg_tokenizer *tok, const prep_chat *c, const hg_chat_msg *m, int n,
                              hg_train_on on) {
    char *full = NULL;
    size_t len = 0;
    HG_TRY(render(c, m, n, 0, &full, &len));
    hg_status s = append_text(r, tok, full, len, on == HG_TRAIN_ON_ALL);
    int last = -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(m[i].role, "assistant")) last = i;
    for (int i = 0; i < n && s == HG_OK && on != HG_TRAIN_ON_ALL; i++) {
        if (strcmp(m[i].role, "assistant") || (on == HG_TRAIN_ON_LAST && i != last)) continue;
        char *before = NULL, *through = NULL;
        size_t lb = 0, lt = 0, a = 0, b = 0;
        s = render(c, m, i, 1, &before, &lb);
        if (s == HG_OK) s = render(c, m, i + 1, 0, &through, &lt);
        size_t end = 0;
        while (s == HG_OK && end < lt && end < len && through[end] == full[end]) end++;
        if (s == HG_OK && (lb > end || memcmp(full, before, lb)))
            s = hg_fail(HG_ERR_UNSUPPORTED, "messages[%d]: the template renders the conversation up to this message "
                        "otherwise than as the start of the whole, so the message's tokens cannot be told apart", i);
        if (s == HG_OK) s = boundary(r, tok, full, lb, &a);
        if (s == HG_OK) s = boundary(r, tok, full, end, &b);
        for (size_t k = a; s == HG_OK && k < b; k++) r->flags[k] |= HG_TOKEN_TRAIN;
        free(before);
        free(through);
    }
    free(full);
    return s;
}

/* One JSONL line into r (empty when the line is blank). */
hg_status prep_chat_record(prep_chat *c, const char *line, size_t len, hg_train_on on, const int32_t **ids,
                           const uint8_t **flags, size_t *n) {
    rec_buf *r = &c->r;
    const hg_tokenizer *tok = c->tok;
    *ids = NULL, *flags = NULL, *n = 0;
    r->n = 0;
    size_t k = 0;
    while (k < len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
    if (k == len) return HG_OK;
    cJSON *root = cJSON_ParseWithLength(line, len);
    if (!root) return hg_fail(HG_ERR_FORMAT, "not valid JSON");
    hg_status s = HG_OK;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages"),
                *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt"),
                *completion = cJSON_GetObjectItemCaseSensitive(root, "completion");
    if (!cJSON_IsObject(root)) {
        s = hg_fail(HG_ERR_FORMAT, "not a JSON object");
    } else if (msgs) {
        hg_chat_msg *m = NULL;
        int n = 0;
        s = read_messages(msgs, &m, &n);
        if (s == HG_OK) s = conversation(r, tok, c, m, n, on);
        free(m);
    } else if (prompt || completion) {
        if (!cJSON_IsString(prompt)) s = hg_fail(HG_ERR_FORMAT, "prompt: missing or not a string");
        else if (!cJSON_IsString(completion)) s = hg_fail(HG_ERR_FORMAT, "completion: missing or not a string");
        const int32_t bos = hg_tokenizer_bos(tok);
        if (s == HG_OK && bos >= 0) s = append_id(r, bos, on == HG_TRAIN_ON_ALL);
        if (s == HG_OK) s = append_text(r, tok, prompt->valuestring, strlen(prompt->valuestring), on == HG_TRAIN_ON_ALL);
        if (s == HG_OK) s = append_text(r, tok, completion->valuestring, strlen(completion->valuestring), 1);
        if (s == HG_OK && c->eos_id < 0)
            s = hg_fail(HG_ERR_FORMAT, "%s: eos_token %s%.80s%s, which ends a completion, %s", c->source, c->eos ? "\"" : "",
                        c->eos ? c->eos : "", c->eos ? "\"" : "", c->eos ? "is not a token of the tokenizer" : "is not set");
        if (s == HG_OK) s = append_id(r, c->eos_id, 1);
    } else {
        s = hg_fail(HG_ERR_FORMAT, "neither \"messages\" nor \"prompt\" and \"completion\"");
    }
    cJSON_Delete(root);
    if (s != HG_OK || !r->n) return s;
    r->flags[0] = (uint8_t)((r->flags[0] & ~HG_TOKEN_TRAIN) | HG_TOKEN_DOC); /* no target */
    *ids = r->ids, *flags = r->flags, *n = r->n;
    return HG_OK;
}

/* ---- the files ---- */

static size_t count_lines(const uint8_t *d, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += d[i] == '\n';
    return n + (len > 0 && d[len - 1] != '\n');
}

/* Removes the shards o wrote (after a failure). */
static void remove_written(prep_out *o) {
    if (o->open) shard_writer_abort(&o->w), o->open = 0;
    for (int k = 0; k < o->n_shards; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", o->dir, o->split, k);
        remove(path);
    }
}

hg_status hg_prepare_chat(const hg_tokenizer *tok, const char *const *inputs, int n_inputs,
                          const hg_prepare_options *opt, const hg_chat_options *chat, hg_prepare_stats *stats) {
    if (!tok || !inputs || !opt || !chat || !stats || !chat->config)
        return hg_fail(HG_ERR_INVALID, "hg_prepare_chat: NULL argument");
    if ((unsigned)chat->train_on > HG_TRAIN_ON_LAST)
        return hg_fail(HG_ERR_INVALID, "train_on: %d is not an hg_train_on", (int)chat->train_on);
    memset(stats, 0, sizeof *stats);
    HG_TRY(prepare_check(n_inputs, opt));
    prep_chat *c;
    HG_TRY(setup_load(&c, tok, chat->config));
    prep_chat_date(c, chat->date_string);
    /* val: the last val_fraction of the lines of all inputs */
    size_t lines = 0;
    hg_status s = HG_OK;
    for (int f = 0; f < n_inputs && s == HG_OK; f++) {
        const uint8_t *d;
        size_t len;
        s = file_map(inputs[f], &d, &len);
        if (s == HG_OK) lines += count_lines(d, len), file_unmap(d, len);
    }
    const size_t val_from = lines - (size_t)((double)lines * opt->val_fraction);
    prep_out outs[2] = {{.dir = opt->out_dir, .split = "train", .tok = tok, .sep = -1, .shard_tokens = opt->shard_tokens,
                         .with_flags = 1},
                        {.dir = opt->out_dir, .split = "val", .tok = tok, .sep = -1, .shard_tokens = opt->shard_tokens,
                         .with_flags = 1}};
    size_t at = 0;
    for (int f = 0; f < n_inputs && s == HG_OK; f++) {
        const uint8_t *d;
        size_t len;
        if ((s = file_map(inputs[f], &d, &len)) != HG_OK) break;
        stats->bytes += len;
        size_t line = 0;
        for (size_t p = 0; p < len && s == HG_OK; line++, at++) {
            const uint8_t *nl = memchr(d + p, '\n', len - p);
            size_t e = nl ? (size_t)(nl - d) : len;
            const int32_t *ids;
            const uint8_t *flags;
            size_t n;
            s = prep_chat_record(c, (const char *)d + p, e - p, chat->train_on, &ids, &flags, &n);
            if (s != HG_OK) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", hg_last_error());
                s = hg_fail(s, "%s: line %zu: %s", inputs[f], line + 1, msg);
                break;
            }
            size_t trained = 0;
            for (size_t k = 0; k < n; k++) trained += (flags[k] & HG_TOKEN_TRAIN) != 0;
            if (n && !trained) stats->untrained++;
            if (trained) {
                s = prep_out_write(&outs[at >= val_from], ids, flags, n, 1);
                stats->documents++, stats->targets += trained;
            }
            p = e + 1;
        }
        file_unmap(d, len);
        if (s == HG_OK && opt->progress)
            opt->progress(opt->progress_ctx, stats->bytes, stats->bytes, outs[0].tokens + outs[1].tokens);
    }
    if (s == HG_OK && !stats->documents)
        s = hg_fail(HG_ERR_INVALID, "%s%s: no record with a trained token (%llu left out for having none)", inputs[0],
                    n_inputs > 1 ? " and the other inputs" : "", (unsigned long long)stats->untrained);
    for (int k = 0; k < 2 && s == HG_OK; k++) s = prep_out_finish(&outs[k]);
    if (s != HG_OK) remove_written(&outs[0]), remove_written(&outs[1]);
    stats->train_tokens = outs[0].tokens;
    stats->val_tokens = outs[1].tokens;
    stats->train_shards = outs[0].n_shards;
    stats->val_shards = outs[1].n_shards;
    prep_chat_free(c);
    return s;
}
