/* Hugging Face tokenizer.json: BPE models, byte-level (GPT-2, Llama 3, Qwen2) or
 * sentencepiece-style with byte fallback (Mistral, Llama 2), read with the parts of
 * the pipeline that change the ids: added tokens, normalizer, pre-tokenizer, model,
 * post-processor (its BOS) and decoder. Every key that would change the computation
 * and is not run here is refused by name. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/fileio.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "data/vocab.h"

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

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 "▁", sentencepiece's space */

typedef struct tj {
    const char *name; /* the file, in messages */
    int byte_level;   /* a ByteLevel pre-tokenizer: vocabulary in GPT-2's byte alphabet */
    int byte_fallback;
    int metaspace;    /* a Metaspace pre-tokenizer (sentencepiece style) */
    int meta_prepend; /* its prepend scheme: 0 never, 1 first, 2 always */
    int meta_split;
    int spaces_marked; /* the normalizer or pre-tokenizer turns " " into "▁" */
    int known_patterns;
    int strip_space;
} tj;

/* ------------------------------------------------------------- JSON helpers */

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }
static int is_null(const cJSON *j) { return !j || cJSON_IsNull(j); }

/* Refuses keys of o that are not in allowed (NULL-terminated): a key handgrad does
 * not know may change the ids. */
static hg_status check_keys(const tj *c, const cJSON *o, const char *path, const char *const *allowed) {
    for (const cJSON *e = o->child; e; e = e->next) {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(e->string, *a);
        if (!ok)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s%s%s: a key handgrad does not know, refused as it may change the ids",
                           c->name, path, *path ? "." : "", e->string);
    }
    return HG_OK;
}

static hg_status want_object(const tj *c, const cJSON *o, const char *path) {
    if (!cJSON_IsObject(o)) return hg_fail(HG_ERR_FORMAT, "%s: %s: want a JSON object", c->name, path);
    return HG_OK;
}

/* A boolean key: absent or null gives dflt. */
static hg_status get_bool(const tj *c, const cJSON *o, const char *path, const char *key, int dflt, int *out) {
    const cJSON *j = get(o, key);
    *out = dflt;
    if (is_null(j)) return HG_OK;
    if (!cJSON_IsBool(j)) return hg_fail(HG_ERR_FORMAT, "%s: %s.%s: want true or false", c->name, path, key);
    *out = cJSON_IsTrue(j);
    return HG_OK;
}

static hg_status get_string(const tj *c, const cJSON *o, const char *path, const char *key, const char **out) {
    const cJSON *j = get(o, key);
    if (!cJSON_IsString(j)) return hg_fail(HG_ERR_FORMAT, "%s: %s.%s: want a string", c->name, path, key);
    *out = j->valuestring;
    return HG_OK;
}

static const char *type_of(const cJSON *o) {
    const cJSON *j = get(o, "type");
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* An id: an integer in [0, 2^30). */
static int json_id(const cJSON *j, int32_t *id) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0 && v < (double)(1 << 30) && v == (double)(int64_t)v)) return 0;
    *id = (int32_t)v;
    return 1;
}

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

/* ------------------------------------------------------------- pipeline */

static hg_status parse_normalizer(tj *c, hg_tokenizer *t, const cJSON *n, const char *path) {
    if (is_null(n)) return HG_OK;
    HG_TRY(want_object(c, n, path));
    const char *type = type_of(n);
    char sub[160];
    if (!type) return hg_fail(HG_ERR_FORMAT, "%s: %s.type: want a string", c->name, path);
    if (!strcmp(type, "Sequence")) {
        static const char *const keys[] = {"type", "normalizers", NULL};
        HG_TRY(check_keys(c, n, path, keys));
        const cJSON *list = get(n, "normalizers");
        if (!cJSON_IsArray(list)) return hg_fail(HG_ERR_FORMAT, "%s: %s.normalizers: want an array", c->name, path);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", path, i);
            HG_TRY(parse_normalizer(c, t, e, sub));
        }
        return HG_OK;
    }
    snprintf(sub, sizeof sub, "%s: %s", c->name, path);
    if (!strcmp(type, "NFC")) {
        static const char *const keys[] = {"type", NULL};
        HG_TRY(check_keys(c, n, path, keys));
        return norm_add(&t->norm, NORM_NFC, "", 0, "", 0, sub);
    }
    if (!strcmp(type, "Prepend")) {
        static const char *const keys[] = {"type", "prepend", NULL};
        HG_TRY(check_keys(c, n, path, keys));
        const char *p = "";
        HG_TRY(get_string(c, n, path, "prepend", &p));
        if (!c->byte_level && strchr(p, ' '))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.prepend: a space here is not supported", c->name, path);
        return norm_add(&t->norm, NORM_PREPEND, p, strlen(p), "", 0, sub);
    }
    if (!strcmp(type, "Replace")) {
        static const char *const keys[] = {"type", "pattern", "content", NULL};
        HG_TRY(check_keys(c, n, path, keys));
        const cJSON *pat = get(n, "pattern");
        const cJSON *lit = cJSON_IsObject(pat) ? get(pat, "String") : NULL;
        if (!cJSON_IsString(lit) || pat->child->next)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.pattern: only {\"String\": ...} is supported", c->name, path);
        const char *to = "";
        HG_TRY(get_string(c, n, path, "content", &to));
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
    HG_TRY(want_object(c, p, path));
    const char *type = type_of(p);
    char where[200];
    snprintf(where, sizeof where, "%s: %s", c->name, path);
    if (!type) return hg_fail(HG_ERR_FORMAT, "%s: %s.type: want a string", c->name, path);
    if (!strcmp(type, "ByteLevel")) {
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        HG_TRY(check_keys(c, p, path, keys));
        int prefix, regex, trim;
        HG_TRY(get_bool(c, p, path, "add_prefix_space", 0, &prefix));
        HG_TRY(get_bool(c, p, path, "use_regex", 1, &regex));
        HG_TRY(get_bool(c, p, path, "trim_offsets", 1, &trim)); /* offsets only */
        if (prefix)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.add_prefix_space: true is not supported", c->name, path);
        if (!last)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s: ByteLevel must be the last pre-tokenizer", c->name, path);
        c->byte_level = 1;
        return regex ? pretok_add_gpt2(pre) : HG_OK;
    }
    if (!strcmp(type, "Split")) {
        static const char *const keys[] = {"type", "pattern", "behavior", "invert", NULL};
        HG_TRY(check_keys(c, p, path, keys));
        const char *behavior = "";
        int invert;
        HG_TRY(get_string(c, p, path, "behavior", &behavior));
        HG_TRY(get_bool(c, p, path, "invert", 0, &invert));
        if (strcmp(behavior, "Isolated"))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.behavior: \"%.40s\" is not supported (handgrad runs Isolated)",
                           c->name, path, behavior);
        if (invert) return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.invert: true is not supported", c->name, path);
        const cJSON *pat = get(p, "pattern");
        const cJSON *re = cJSON_IsObject(pat) ? get(pat, "Regex") : NULL, *lit = cJSON_IsObject(pat) ? get(pat, "String") : NULL;
        if (!cJSON_IsObject(pat) || !pat->child || pat->child->next || (!cJSON_IsString(re) && !cJSON_IsString(lit)))
            return hg_fail(HG_ERR_FORMAT, "%s: %s.pattern: want {\"Regex\": ...} or {\"String\": ...}", c->name, path);
        if (lit) {
            if (!*lit->valuestring) return hg_fail(HG_ERR_FORMAT, "%s: %s.pattern.String: empty", c->name, path);
            snprintf(where, sizeof where, "%s: %s.pattern.String", c->name, path);
            c->known_patterns = 0;
            return pretok_add(pre, lit->valuestring, strlen(lit->valuestring), 1, where);
        }
        const char *src = re->valuestring, *why;
        size_t at;
        snprintf(where, sizeof where, "%s: %s.pattern.Regex", c->name, path);
        char *pcre = pretok_translate(src, strlen(src), &why, &at);
        if (!pcre) return hg_fail(HG_ERR_UNSUPPORTED, "%s: offset %zu: %s", where, at, why);
        if (strcmp(src, llama3_regex) && strcmp(src, qwen2_regex) && strcmp(src, gpt2_regex)) c->known_patterns = 0;
        hg_status s = pretok_add(pre, pcre, strlen(pcre), 0, where);
        free(pcre);
        return s;
    }
    if (!strcmp(type, "Digits")) {
        static const char *const keys[] = {"type", "individual_digits", NULL};
        HG_TRY(check_keys(c, p, path, keys));
        int each;
        HG_TRY(get_bool(c, p, path, "individual_digits", 0, &each));
        /* Rust's char::is_numeric is the general category N. */
        return each ? pretok_add(pre, "\\p{N}", 5, 0, where) : pretok_add(pre, "\\p{N}+", 6, 0, where);
    }
    if (!strcmp(type, "Metaspace")) {
        static const char *const keys[] = {"type", "replacement", "prepend_scheme", "add_prefix_space", "split",
                                           "str_rep", NULL};
        HG_TRY(check_keys(c, p, path, keys));
        if (!only)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s: Metaspace is supported only as the only pre-tokenizer", c->name,
                           path);
        const char *rep = "";
        HG_TRY(get_string(c, p, path, "replacement", &rep));
        if (strcmp(rep, SPACE_MARK))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.replacement: \"%.20s\" is not supported (want \"" SPACE_MARK "\")",
                           c->name, path, rep);
        const cJSON *scheme = get(p, "prepend_scheme");
        int prefix;
        HG_TRY(get_bool(c, p, path, "add_prefix_space", 1, &prefix));
        c->meta_prepend = prefix ? 2 : 0;
        if (!is_null(scheme)) {
            const char *s = cJSON_IsString(scheme) ? scheme->valuestring : "";
            if (!strcmp(s, "always")) c->meta_prepend = 2;
            else if (!strcmp(s, "first")) c->meta_prepend = 1;
            else if (!strcmp(s, "never")) c->meta_prepend = 0;
            else return hg_fail(HG_ERR_FORMAT, "%s: %s.prepend_scheme: want \"always\", \"first\" or \"never\"", c->name, path);
        }
        HG_TRY(get_bool(c, p, path, "split", 1, &c->meta_split));
        c->metaspace = c->spaces_marked = 1;
        /* On the internal text, where "▁" is a space: each space begins a piece. */
        return c->meta_split ? pretok_add(pre, " [^ ]*|[^ ]+", 12, 0, where) : HG_OK;
    }
    return hg_fail(HG_ERR_UNSUPPORTED,
                   "%s: %s.type: \"%.40s\" is not supported (handgrad runs ByteLevel, Split, Digits, Metaspace)", c->name,
                   path, type);
}

static hg_status parse_pre_tokenizer(tj *c, pretok *pre, const cJSON *p) {
    c->known_patterns = 1;
    if (is_null(p)) return HG_OK;
    HG_TRY(want_object(c, p, "pre_tokenizer"));
    const char *type = type_of(p);
    if (type && !strcmp(type, "Sequence")) {
        static const char *const keys[] = {"type", "pretokenizers", NULL};
        HG_TRY(check_keys(c, p, "pre_tokenizer", keys));
        const cJSON *list = get(p, "pretokenizers");
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
    HG_TRY(check_keys(c, p, path, keys));
    const cJSON *single = get(p, "single");
    int n = cJSON_IsArray(single) ? cJSON_GetArraySize(single) : -1;
    const cJSON *last = n > 0 ? cJSON_GetArrayItem(single, n - 1) : NULL;
    const cJSON *seq = cJSON_IsObject(last) ? get(last, "Sequence") : NULL;
    const cJSON *seq_id = cJSON_IsObject(seq) ? get(seq, "id") : NULL;
    if (n < 1 || n > 2 || !cJSON_IsString(seq_id) || strcmp(seq_id->valuestring, "A"))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.single: only [$A] or [<special token>, $A] is supported", c->name,
                       path);
    if (n == 1) return HG_OK;
    const cJSON *sp = get(single->child, "SpecialToken");
    const cJSON *name = cJSON_IsObject(sp) ? get(sp, "id") : NULL;
    if (!cJSON_IsString(name))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.single[0]: only a SpecialToken is supported before $A", c->name,
                       path);
    const cJSON *specials = get(p, "special_tokens");
    const cJSON *entry = cJSON_IsObject(specials) ? get(specials, name->valuestring) : NULL;
    const cJSON *ids = cJSON_IsObject(entry) ? get(entry, "ids") : NULL;
    int32_t id;
    if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) != 1 || !json_id(ids->child, &id) || id >= t->n_vocab)
        return hg_fail(HG_ERR_FORMAT, "%s: %s.special_tokens.\"%.40s\".ids: want one id in [0, %d)", c->name, path,
                       name->valuestring, (int)t->n_vocab);
    t->bos = id;
    return HG_OK;
}

static hg_status parse_post_processor(const tj *c, hg_tokenizer *t, const cJSON *p, const char *path) {
    if (is_null(p)) return HG_OK;
    HG_TRY(want_object(c, p, path));
    const char *type = type_of(p);
    if (type && !strcmp(type, "ByteLevel")) {
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        return check_keys(c, p, path, keys); /* offsets only */
    }
    if (type && !strcmp(type, "TemplateProcessing")) return parse_template(c, t, p, path);
    if (type && !strcmp(type, "Sequence")) {
        static const char *const keys[] = {"type", "processors", NULL};
        HG_TRY(check_keys(c, p, path, keys));
        const cJSON *list = get(p, "processors");
        if (!cJSON_IsArray(list)) return hg_fail(HG_ERR_FORMAT, "%s: %s.processors: want an array", c->name, path);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char sub[120];
            snprintf(sub, sizeof sub, "%s.processors[%d]", path, i);
            HG_TRY(parse_post_processor(c, t, e, sub));
        }
        return HG_OK;
    }
    return hg_fail(HG_ERR_UNSUPPORTED,
                   "%s: %s.type: \"%.40s\" is not supported (handgrad runs TemplateProcessing, ByteLevel)", c->name,
                   path, type ? type : "");
}

static int string_is(const cJSON *o, const char *key, const char *want) {
    const cJSON *j = get(o, key);
    return cJSON_IsString(j) && !strcmp(j->valuestring, want);
}

static int number_is(const cJSON *o, const char *key, double want) {
    const cJSON *j = get(o, key);
    return cJSON_IsNumber(j) && j->valuedouble == want;
}

static hg_status parse_decoder(tj *c, const cJSON *d) {
    if (is_null(d))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder: null is not supported (want ByteLevel or the sentencepiece "
                                           "Sequence)", c->name);
    HG_TRY(want_object(c, d, "decoder"));
    const char *type = type_of(d);
    if (type && !strcmp(type, "ByteLevel")) {
        if (!c->byte_level)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.type: ByteLevel without a ByteLevel pre_tokenizer", c->name);
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        return check_keys(c, d, "decoder", keys);
    }
    if (c->byte_level)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.type: \"%.40s\" with a ByteLevel pre_tokenizer (want ByteLevel)",
                       c->name, type ? type : "");
    if (type && !strcmp(type, "Metaspace")) {
        static const char *const keys[] = {"type", "replacement", "prepend_scheme", "add_prefix_space", "split",
                                           "str_rep", NULL};
        HG_TRY(check_keys(c, d, "decoder", keys));
        if (!string_is(d, "replacement", SPACE_MARK))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.replacement: want \"" SPACE_MARK "\"", c->name);
        if (c->byte_fallback)
            return hg_fail(HG_ERR_UNSUPPORTED,
                           "%s: decoder.type: Metaspace leaves <0xNN> tokens as text; with model.byte_fallback true "
                           "handgrad wants the Sequence with ByteFallback",
                           c->name);
        int prefix;
        HG_TRY(get_bool(c, d, "decoder", "add_prefix_space", 1, &prefix));
        c->strip_space = prefix && !string_is(d, "prepend_scheme", "never");
        return HG_OK;
    }
    if (!type || strcmp(type, "Sequence"))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: decoder.type: \"%.40s\" is not supported", c->name, type ? type : "");
    static const char *const keys[] = {"type", "decoders", NULL};
    HG_TRY(check_keys(c, d, "decoder", keys));
    const cJSON *list = get(d, "decoders");
    if (!cJSON_IsArray(list)) return hg_fail(HG_ERR_FORMAT, "%s: decoder.decoders: want an array", c->name);
    /* Replace "▁" -> " ", ByteFallback, Fuse, Strip(" ", n, 0), in this order. */
    int i = 0, stage = 0, replaced = 0, fallback = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        const char *et = cJSON_IsObject(e) ? type_of(e) : NULL;
        int ok = 0;
        if (et && !strcmp(et, "Replace") && stage < 1) {
            const cJSON *pat = get(e, "pattern");
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
    HG_TRY(want_object(c, model, "model"));
    const char *type = type_of(model);
    if (!type) return hg_fail(HG_ERR_FORMAT, "%s: model.type: want \"BPE\"", c->name);
    if (strcmp(type, "BPE"))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: model.type: \"%.40s\" is not supported; handgrad reads BPE models only",
                       c->name, type);
    HG_TRY(check_keys(c, model, "model", keys));
    if (!is_null(get(model, "dropout")))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: model.dropout: BPE dropout is not supported (want null)", c->name);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *j = get(model, affixes[i]);
        if (!is_null(j) && !(cJSON_IsString(j) && !*j->valuestring))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: model.%s: not supported (want null)", c->name, affixes[i]);
    }
    HG_TRY(get_bool(c, model, "model", "ignore_merges", 0, ignore_merges));
    HG_TRY(get_bool(c, model, "model", "fuse_unk", 0, fuse_unk));
    return HG_OK;
}

/* Reads model.vocab and added_tokens into per-id arrays. */
static hg_status read_tokens(const tj *c, const cJSON *vocab, const cJSON *added, vocab_arrays *v) {
    if (!cJSON_IsObject(vocab)) return hg_fail(HG_ERR_FORMAT, "%s: model.vocab: want an object of token -> id", c->name);
    if (!is_null(added) && !cJSON_IsArray(added))
        return hg_fail(HG_ERR_FORMAT, "%s: added_tokens: want an array", c->name);
    int32_t max_id = -1, id;
    size_t total = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!json_id(e, &id))
            return hg_fail(HG_ERR_FORMAT, "%s: model.vocab: \"%.60s\": the id must be an integer in [0, 2^30)", c->name,
                           e->string);
        if (id > max_id) max_id = id;
        total += strlen(e->string);
    }
    int i = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, i++) {
        if (!cJSON_IsObject(e) || !json_id(get(e, "id"), &id))
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
            if (json_id(e, &id) && id < entries) seen[id] = 1;
        for (const cJSON *e = added ? added->child : NULL; e; e = e->next)
            if (json_id(get(e, "id"), &id) && id < entries) seen[id] = 1;
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
        json_id(e, &id);
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
        HG_TRY(check_keys(c, e, path, keys));
        const char *content = "";
        HG_TRY(get_string(c, e, path, "content", &content));
        if (!*content) return hg_fail(HG_ERR_FORMAT, "%s: %s.content: empty", c->name, path);
        static const char *const refused[] = {"single_word", "lstrip", "rstrip"};
        int special, normalized, flag;
        for (int r = 0; r < 3; r++) {
            HG_TRY(get_bool(c, e, path, refused[r], 0, &flag));
            if (flag) return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s.%s: true is not supported", c->name, path, refused[r]);
        }
        HG_TRY(get_bool(c, e, path, "special", 0, &special));
        HG_TRY(get_bool(c, e, path, "normalized", !special, &normalized));
        json_id(get(e, "id"), &id);
        if (v->added_index[id] >= 0)
            return hg_fail(HG_ERR_FORMAT, "%s: %s.id: %d is already added_tokens[%d]", c->name, path, (int)id,
                           v->added_index[id]);
        if (v->key[id] && strcmp(v->key[id], content))
            return hg_fail(HG_ERR_FORMAT, "%s: %s.id: %d is \"%.60s\" in model.vocab, not \"%.60s\"", c->name, path,
                           (int)id, v->key[id], content);
        v->added_index[id] = i;
        v->content[id] = content;
        v->flags[id] |= TOK_ADDED | (special ? TOK_SPECIAL : 0) | (normalized ? TOK_NORMALIZED : 0);
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
    HG_TRY(check_keys(c, root, "", keys));
    if (!is_null(get(root, "truncation")))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: truncation: not supported (want null)", c->name);
    if (!is_null(get(root, "padding")))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: padding: not supported (want null)", c->name);
    const cJSON *model = get(root, "model");
    int ignore_merges = 0, fuse_unk = 0;
    HG_TRY(check_model_keys(c, model, &ignore_merges, &fuse_unk));
    HG_TRY(get_bool(c, model, "model", "byte_fallback", 0, &c->byte_fallback));
    /* The pre-tokenizer decides how the vocabulary is written, so it comes first. */
    pretok pre;
    pretok_init_empty(&pre);
    hg_status s = parse_pre_tokenizer(c, &pre, get(root, "pre_tokenizer"));
    vocab_arrays v = {0};
    hg_tokenizer *t = NULL;
    if (s == HG_OK) s = read_tokens(c, get(model, "vocab"), get(root, "added_tokens"), &v);
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
    if (s == HG_OK) s = parse_normalizer(c, t, get(root, "normalizer"), "normalizer");
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
        const cJSON *unk = get(model, "unk_token");
        if (!is_null(unk)) {
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
    if (s == HG_OK) s = read_merges(c, t, get(model, "merges"));
    if (s == HG_OK) s = parse_post_processor(c, t, get(root, "post_processor"), "post_processor");
    if (s == HG_OK) s = parse_decoder(c, get(root, "decoder"));
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
    *out = NULL;
    uint8_t *buf;
    size_t len;
    HG_TRY(file_read_all(path, &buf, &len));
    hg_status s = vocab_parse_tokjson(out, buf, len, path);
    free(buf);
    return s;
}
