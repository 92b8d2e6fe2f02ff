/* tokenizer.json: the pipeline around the BPE model (normalizer, pre-tokenizer,
 * post-processor, decoder). Each part that handgrad runs is read into the tokenizer;
 * every other type or key is refused by its path. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/tokjson.h"

/* The patterns of the pre-tokenizers handgrad knows, as tokenizer.json writes them
 * (for Oniguruma). With these, a cut after "\n" between ASCII graphic characters
 * leaves every piece as it was (see prepare.c). */
static const char llama3_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char gpt2_regex[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------- JSON helpers */

const cJSON *tj_get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }
int tj_is_null(const cJSON *j) { return !j || cJSON_IsNull(j); }

hg_status tj_check_keys(const tj *c, const cJSON *o, const char *path, const char *const *allowed) {
    for (const cJSON *e = o->child; e; e = e->next) {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(e->string, *a);
        if (!ok)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s%s%s: a key handgrad does not know, refused as it may change the ids",
                           c->name, path, *path ? "." : "", e->string);
    }
    return HG_OK;
}

hg_status tj_want_object(const tj *c, const cJSON *o, const char *path) {
    if (!cJSON_IsObject(o)) return hg_fail(HG_ERR_FORMAT, "%s: %s: want a JSON object", c->name, path);
    return HG_OK;
}

hg_status tj_get_bool(const tj *c, const cJSON *o, const char *path, const char *key, int dflt, int *out) {
    const cJSON *j = tj_get(o, key);
    *out = dflt;
    if (tj_is_null(j)) return HG_OK;
    if (!cJSON_IsBool(j)) return hg_fail(HG_ERR_FORMAT, "%s: %s.%s: want true or false", c->name, path, key);
    *out = cJSON_IsTrue(j);
    return HG_OK;
}

hg_status tj_get_string(const tj *c, const cJSON *o, const char *path, const char *key, const char **out) {
    const cJSON *j = tj_get(o, key);
    if (!cJSON_IsString(j)) return hg_fail(HG_ERR_FORMAT, "%s: %s.%s: want a string", c->name, path, key);
    *out = j->valuestring;
    return HG_OK;
}

int tj_json_id(const cJSON *j, int32_t *id) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0 && v < (double)(1 << 30) && v == (double)(int64_t)v)) return 0;
    *id = (int32_t)v;
    return 1;
}

const char *tj_type_of(const cJSON *o) {
    const cJSON *j = tj_get(o, "type");
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* ------------------------------------------------------------- pipeline */

hg_status tj_parse_normalizer(tj *c, hg_tokenizer *t, const cJSON *n, const char *path) {
    if (tj_is_null(n)) return HG_OK;
    HG_TRY(tj_want_object(c, n, path));
    const char *type = tj_type_of(n);
    char sub[160];
    if (!type) return hg_fail(HG_ERR_FORMAT, "%s: %s.type: want a string", c->name, path);
    if (!strcmp(type, "Sequence")) {
        static const char *const keys[] = {"type", "normalizers", NULL};
        HG_TRY(tj_check_keys(c, n, path, keys));
        const cJSON *list = tj_get(n, "normalizers");
        if (!cJSON_IsArray(list)) return hg_fail(HG_ERR_FORMAT, "%s: %s.normalizers: want an array", c->name, path);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", path, i);
            HG_TRY(tj_parse_normalizer(c, t, e, sub));
        }
        return HG_OK;
    }
    snprintf(sub, sizeof sub, "%s: %s", c->name, path);
    if (!strcmp(type, "NFC")) {
        static const char *const keys[] = {"type", NULL};
        HG_TRY(tj_check_keys(c, n, path, keys));
        return norm_add(&t->norm, NORM_NFC, "", 0, "", 0, sub);
    }
    if (!strcmp(type, "Prepend")) {
        static const char *const keys[] = {"type", "prepend", NULL};
        HG_TRY(tj_check_keys(c, n, path, keys));
        const char *p = "";
        HG_TRY(tj_get_string(c, n, path, "prepend", &p));
        if (!c->byte_level && strchr(p, ' '))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.prepend: a space here is not supported", c->name, path);
        return norm_add(&t->norm, NORM_PREPEND, p, strlen(p), "", 0, sub);
    }
    if (!strcmp(type, "Replace")) {
        static const char *const keys[] = {"type", "pattern", "content", NULL};
        HG_TRY(tj_check_keys(c, n, path, keys));
        const cJSON *pat = tj_get(n, "pattern");
        const cJSON *lit = cJSON_IsObject(pat) ? tj_get(pat, "String") : NULL;
        if (!cJSON_IsString(lit) || pat->child->next)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.pattern: only {\"String\": ...} is supported", c->name, path);
        const char *to = "";
        HG_TRY(tj_get_string(c, n, path, "content", &to));
        if (!*lit->valuestring) return hg_fail(HG_ERR_FORMAT, "%s: %s.pattern.String: empty", c->name, path);
        if (!c->byte_level) {
            if (!strcmp(lit->valuestring, " ") && !strcmp(to, SPACE_MARK)) c->spaces_marked = 1;
            else if (strchr(to, ' '))
                return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.content: a space here is not supported", c->name, path);
        }
        return norm_add(&t->norm, NORM_REPLACE, lit->valuestring, strlen(lit->valuestring), to, strlen(to), sub);
    }
    return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.type: \"%.40s\" is not supported (handgrad runs NFC, Prepend, Replace)",
                   c->name, path, type);
}

/* One pre-tokenizer step; last: it is the last of its sequence. */
static hg_status parse_pretok_step(tj *c, pretok *pre, const cJSON *p, const char *path, int last, int only) {
    HG_TRY(tj_want_object(c, p, path));
    const char *type = tj_type_of(p);
    char where[200];
    snprintf(where, sizeof where, "%s: %s", c->name, path);
    if (!type) return hg_fail(HG_ERR_FORMAT, "%s: %s.type: want a string", c->name, path);
    if (!strcmp(type, "ByteLevel")) {
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        HG_TRY(tj_check_keys(c, p, path, keys));
        int prefix, regex, trim;
        HG_TRY(tj_get_bool(c, p, path, "add_prefix_space", 0, &prefix));
        HG_TRY(tj_get_bool(c, p, path, "use_regex", 1, &regex));
        HG_TRY(tj_get_bool(c, p, path, "trim_offsets", 1, &trim)); /* offsets only */
        if (prefix)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.add_prefix_space: true is not supported", c->name, path);
        if (!last)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s: ByteLevel must be the last pre-tokenizer", c->name, path);
        c->byte_level = 1;
        return regex ? pretok_add_gpt2(pre) : HG_OK;
    }
    if (!strcmp(type, "Split")) {
        static const char *const keys[] = {"type", "pattern", "behavior", "invert", NULL};
        HG_TRY(tj_check_keys(c, p, path, keys));
        const char *behavior = "";
        int invert;
        HG_TRY(tj_get_string(c, p, path, "behavior", &behavior));
        HG_TRY(tj_get_bool(c, p, path, "invert", 0, &invert));
        /* Isolated keeps every piece, so invert changes nothing; Removed drops the
         * matches, or with invert the text between them. */
        pretok_behavior b;
        if (!strcmp(behavior, "Isolated")) b = PRETOK_ISOLATED;
        else if (!strcmp(behavior, "Removed")) b = invert ? PRETOK_MATCHES_ONLY : PRETOK_REMOVED;
        else if (!strcmp(behavior, "MergedWithPrevious")) b = PRETOK_MERGED_PREV;
        else
            return hg_fail(HG_ERR_UNSUPPORTED,
                           "%s: %s.behavior: \"%.40s\" is not supported (handgrad runs Isolated, Removed, "
                           "MergedWithPrevious)",
                           c->name, path, behavior);
        if (invert && b == PRETOK_MERGED_PREV)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.invert: true is not supported with MergedWithPrevious", c->name,
                           path);
        const cJSON *pat = tj_get(p, "pattern");
        const cJSON *re = cJSON_IsObject(pat) ? tj_get(pat, "Regex") : NULL, *lit = cJSON_IsObject(pat) ? tj_get(pat, "String") : NULL;
        if (!cJSON_IsObject(pat) || !pat->child || pat->child->next || (!cJSON_IsString(re) && !cJSON_IsString(lit)))
            return hg_fail(HG_ERR_FORMAT, "%s: %s.pattern: want {\"Regex\": ...} or {\"String\": ...}", c->name, path);
        if (lit) {
            const char *src = lit->valuestring;
            if (!*src) return hg_fail(HG_ERR_FORMAT, "%s: %s.pattern.String: empty", c->name, path);
            snprintf(where, sizeof where, "%s: %s.pattern.String", c->name, path);
            c->known_patterns = 0;
            if (c->ends_byte_level) return pretok_add_split(pre, src, strlen(src), 1, b, where);
            /* Sentencepiece style: the package splits text whose spaces are all "▁"
             * already, and handgrad's text holds a space for each "▁". A literal with a
             * space never matches (Gemma's Split " "), so the step changes nothing. */
            if (strchr(src, ' ')) {
                if (b == PRETOK_MATCHES_ONLY)
                    return hg_fail(HG_ERR_UNSUPPORTED,
                                   "%s: %s.pattern.String: a space never matches here, so Removed with invert would "
                                   "drop all text",
                                   c->name, path);
                return HG_OK;
            }
            size_t n = strlen(src), k = 0;
            char *mapped = malloc(n + 1);
            if (!mapped) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", c->name);
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && !memcmp(src + i, SPACE_MARK, 3)) {
                    mapped[k++] = ' ';
                    i += 3;
                } else {
                    mapped[k++] = src[i++];
                }
            }
            if (b == PRETOK_REMOVED || b == PRETOK_MATCHES_ONLY) pre->may_drop = 1;
            hg_status s = pretok_add_split(pre, mapped, k, 1, b, where);
            free(mapped);
            return s;
        }
        const char *src = re->valuestring, *why;
        size_t at;
        snprintf(where, sizeof where, "%s: %s.pattern.Regex", c->name, path);
        if (!c->ends_byte_level)
            return hg_fail(HG_ERR_UNSUPPORTED,
                           "%s: a regex Split is supported only before ByteLevel (in the sentencepiece style the "
                           "package splits text where spaces are \"" SPACE_MARK "\")",
                           where);
        char *pcre = pretok_translate(src, strlen(src), &why, &at);
        if (!pcre) return hg_fail(HG_ERR_UNSUPPORTED, "%s: offset %zu: %s", where, at, why);
        /* The known patterns match every character: nothing lies between their matches,
         * so Removed with invert is Isolated. */
        int known = !strcmp(src, llama3_regex) || !strcmp(src, qwen2_regex) || !strcmp(src, gpt2_regex);
        if (!known || (b != PRETOK_ISOLATED && b != PRETOK_MATCHES_ONLY)) c->known_patterns = 0;
        if (b == PRETOK_REMOVED || (b == PRETOK_MATCHES_ONLY && !known)) pre->may_drop = 1;
        hg_status s = pretok_add_split(pre, pcre, strlen(pcre), 0, b, where);
        free(pcre);
        return s;
    }
    if (!strcmp(type, "Digits")) {
        static const char *const keys[] = {"type", "individual_digits", NULL};
        HG_TRY(tj_check_keys(c, p, path, keys));
        int each;
        HG_TRY(tj_get_bool(c, p, path, "individual_digits", 0, &each));
        /* Rust's char::is_numeric is the general category N. */
        return each ? pretok_add(pre, "\\p{N}", 5, 0, where) : pretok_add(pre, "\\p{N}+", 6, 0, where);
    }
    if (!strcmp(type, "Metaspace")) {
        static const char *const keys[] = {"type", "replacement", "prepend_scheme", "add_prefix_space", "split",
                                           "str_rep", NULL};
        HG_TRY(tj_check_keys(c, p, path, keys));
        if (!only)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s: Metaspace is supported only as the only pre-tokenizer", c->name,
                           path);
        const char *rep = "";
        HG_TRY(tj_get_string(c, p, path, "replacement", &rep));
        if (strcmp(rep, SPACE_MARK))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.replacement: \"%.20s\" is not supported (want \"" SPACE_MARK "\")",
                           c->name, path, rep);
        const cJSON *scheme = tj_get(p, "prepend_scheme");
        int prefix;
        HG_TRY(tj_get_bool(c, p, path, "add_prefix_space", 1, &prefix));
        c->meta_prepend = prefix ? 2 : 0;
        if (!tj_is_null(scheme)) {
            const char *s = cJSON_IsString(scheme) ? scheme->valuestring : "";
            if (!strcmp(s, "always")) c->meta_prepend = 2;
            else if (!strcmp(s, "first")) c->meta_prepend = 1;
            else if (!strcmp(s, "never")) c->meta_prepend = 0;
            else return hg_fail(HG_ERR_FORMAT, "%s: %s.prepend_scheme: want \"always\", \"first\" or \"never\"", c->name, path);
        }
        HG_TRY(tj_get_bool(c, p, path, "split", 1, &c->meta_split));
        c->metaspace = c->spaces_marked = 1;
        /* On the internal text, where "▁" is a space: each space begins a piece. */
        return c->meta_split ? pretok_add(pre, " [^ ]*|[^ ]+", 12, 0, where) : HG_OK;
    }
    return hg_fail(HG_ERR_UNSUPPORTED,
                   "%s: %s.type: \"%.40s\" is not supported (handgrad runs ByteLevel, Split, Digits, Metaspace)", c->name,
                   path, type);
}

hg_status tj_parse_pre_tokenizer(tj *c, pretok *pre, const cJSON *p) {
    c->known_patterns = 1;
    if (tj_is_null(p)) return HG_OK;
    HG_TRY(tj_want_object(c, p, "pre_tokenizer"));
    const char *type = tj_type_of(p);
    /* Whether the steps before ByteLevel see raw spaces or "▁" depends on the last step. */
    const cJSON *list = type && !strcmp(type, "Sequence") ? tj_get(p, "pretokenizers") : NULL;
    const cJSON *last = cJSON_IsArray(list) ? cJSON_GetArrayItem(list, cJSON_GetArraySize(list) - 1) : p;
    const char *last_type = cJSON_IsObject(last) ? tj_type_of(last) : NULL;
    c->ends_byte_level = last_type && !strcmp(last_type, "ByteLevel");
    if (type && !strcmp(type, "Sequence")) {
        static const char *const keys[] = {"type", "pretokenizers", NULL};
        HG_TRY(tj_check_keys(c, p, "pre_tokenizer", keys));
        if (!cJSON_IsArray(list))
            return hg_fail(HG_ERR_FORMAT, "%s: pre_tokenizer.pretokenizers: want an array", c->name);
        int i = 0, n = cJSON_GetArraySize(list);
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char path[80];
            snprintf(path, sizeof path, "pre_tokenizer.pretokenizers[%d]", i);
            HG_TRY(parse_pretok_step(c, pre, e, path, i == n - 1, n == 1));
        }
        return HG_OK;
    }
    return parse_pretok_step(c, pre, p, "pre_tokenizer", 1, 1);
}

/* The BOS of a TemplateProcessing: single must be [$A] or [<special>, $A]. */
static hg_status parse_template(const tj *c, hg_tokenizer *t, const cJSON *p, const char *path) {
    static const char *const keys[] = {"type", "single", "pair", "special_tokens", NULL};
    HG_TRY(tj_check_keys(c, p, path, keys));
    const cJSON *single = tj_get(p, "single");
    int n = cJSON_IsArray(single) ? cJSON_GetArraySize(single) : -1;
    const cJSON *last = n > 0 ? cJSON_GetArrayItem(single, n - 1) : NULL;
    const cJSON *seq = cJSON_IsObject(last) ? tj_get(last, "Sequence") : NULL;
    const cJSON *seq_id = cJSON_IsObject(seq) ? tj_get(seq, "id") : NULL;
    if (n < 1 || n > 2 || !cJSON_IsString(seq_id) || strcmp(seq_id->valuestring, "A"))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.single: only [$A] or [<special token>, $A] is supported", c->name,
                       path);
    if (n == 1) return HG_OK;
    const cJSON *sp = tj_get(single->child, "SpecialToken");
    const cJSON *name = cJSON_IsObject(sp) ? tj_get(sp, "id") : NULL;
    if (!cJSON_IsString(name))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.single[0]: only a SpecialToken is supported before $A", c->name,
                       path);
    const cJSON *specials = tj_get(p, "special_tokens");
    const cJSON *entry = cJSON_IsObject(specials) ? tj_get(specials, name->valuestring) : NULL;
    const cJSON *ids = cJSON_IsObject(entry) ? tj_get(entry, "ids") : NULL;
    int32_t id;
    if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) != 1 || !tj_json_id(ids->child, &id) || id >= t->n_vocab)
        return hg_fail(HG_ERR_FORMAT, "%s: %s.special_tokens.\"%.40s\".ids: want one id in [0, %d)", c->name, path,
                       name->valuestring, (int)t->n_vocab);
    t->bos = id;
    return HG_OK;
}

hg_status tj_parse_post_processor(const tj *c, hg_tokenizer *t, const cJSON *p, const char *path) {
    if (tj_is_null(p)) return HG_OK;
    HG_TRY(tj_want_object(c, p, path));
    const char *type = tj_type_of(p);
    if (type && !strcmp(type, "ByteLevel")) {
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        return tj_check_keys(c, p, path, keys); /* offsets only */
    }
    if (type && !strcmp(type, "TemplateProcessing")) return parse_template(c, t, p, path);
    if (type && !strcmp(type, "Sequence")) {
        static const char *const keys[] = {"type", "processors", NULL};
        HG_TRY(tj_check_keys(c, p, path, keys));
        const cJSON *list = tj_get(p, "processors");
        if (!cJSON_IsArray(list)) return hg_fail(HG_ERR_FORMAT, "%s: %s.processors: want an array", c->name, path);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char sub[120];
            snprintf(sub, sizeof sub, "%s.processors[%d]", path, i);
            HG_TRY(tj_parse_post_processor(c, t, e, sub));
        }
        return HG_OK;
    }
    return hg_fail(HG_ERR_UNSUPPORTED,
                   "%s: %s.type: \"%.40s\" is not supported (handgrad runs TemplateProcessing, ByteLevel)", c->name,
                   path, type ? type : "");
}

static int string_is(const cJSON *o, const char *key, const char *want) {
    const cJSON *j = tj_get(o, key);
    return cJSON_IsString(j) && !strcmp(j->valuestring, want);
}

static int number_is(const cJSON *o, const char *key, double want) {
    const cJSON *j = tj_get(o, key);
    return cJSON_IsNumber(j) && j->valuedouble == want;
}

hg_status tj_parse_decoder(tj *c, const cJSON *d) {
    if (tj_is_null(d))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder: null is not supported (want ByteLevel or the sentencepiece "
                                           "Sequence)", c->name);
    HG_TRY(tj_want_object(c, d, "decoder"));
    const char *type = tj_type_of(d);
    if (type && !strcmp(type, "ByteLevel")) {
        if (!c->byte_level)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.type: ByteLevel without a ByteLevel pre_tokenizer", c->name);
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        return tj_check_keys(c, d, "decoder", keys);
    }
    if (c->byte_level)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.type: \"%.40s\" with a ByteLevel pre_tokenizer (want ByteLevel)",
                       c->name, type ? type : "");
    if (type && !strcmp(type, "Metaspace")) {
        static const char *const keys[] = {"type", "replacement", "prepend_scheme", "add_prefix_space", "split",
                                           "str_rep", NULL};
        HG_TRY(tj_check_keys(c, d, "decoder", keys));
        if (!string_is(d, "replacement", SPACE_MARK))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.replacement: want \"" SPACE_MARK "\"", c->name);
        if (c->byte_fallback)
            return hg_fail(HG_ERR_UNSUPPORTED,
                           "%s: decoder.type: Metaspace leaves <0xNN> tokens as text; with model.byte_fallback true "
                           "handgrad wants the Sequence with ByteFallback",
                           c->name);
        int prefix;
        HG_TRY(tj_get_bool(c, d, "decoder", "add_prefix_space", 1, &prefix));
        c->strip_space = prefix && !string_is(d, "prepend_scheme", "never");
        return HG_OK;
    }
    if (!type || strcmp(type, "Sequence"))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.type: \"%.40s\" is not supported", c->name, type ? type : "");
    static const char *const keys[] = {"type", "decoders", NULL};
    HG_TRY(tj_check_keys(c, d, "decoder", keys));
    const cJSON *list = tj_get(d, "decoders");
    if (!cJSON_IsArray(list)) return hg_fail(HG_ERR_FORMAT, "%s: decoder.decoders: want an array", c->name);
    /* Replace "▁" -> " ", ByteFallback, Fuse, Strip(" ", n, 0), in this order. */
    int i = 0, stage = 0, replaced = 0, fallback = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        const char *et = cJSON_IsObject(e) ? tj_type_of(e) : NULL;
        int ok = 0;
        if (et && !strcmp(et, "Replace") && stage < 1) {
            const cJSON *pat = tj_get(e, "pattern");
            ok = cJSON_IsObject(pat) && string_is(pat, "String", SPACE_MARK) && string_is(e, "content", " ");
            stage = 1;
            replaced = ok;
        } else if (et && !strcmp(et, "ByteFallback") && stage < 2) {
            ok = 1;
            stage = 2;
            fallback = 1;
        } else if (et && !strcmp(et, "Fuse") && stage < 3) {
            ok = 1;
            stage = 3;
        } else if (et && !strcmp(et, "Strip") && stage < 4) {
            ok = string_is(e, "content", " ") && number_is(e, "stop", 0) &&
                 (number_is(e, "start", 0) || number_is(e, "start", 1));
            if (ok) c->strip_space = number_is(e, "start", 1);
            stage = 4;
        }
        if (!ok)
            return hg_fail(HG_ERR_UNSUPPORTED,
                           "%s: decoder.decoders[%d]: only Replace \"" SPACE_MARK "\" -> \" \", ByteFallback, Fuse, "
                           "Strip \" \" (start 0 or 1, stop 0), in this order, are supported",
                           c->name, i);
    }
    if (!replaced)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.decoders: no Replace \"" SPACE_MARK "\" -> \" \"", c->name);
    if (c->byte_fallback && !fallback)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.decoders: no ByteFallback, but model.byte_fallback is true",
                       c->name);
    return HG_OK;
}
