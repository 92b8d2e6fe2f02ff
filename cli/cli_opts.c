/* The option tables of the commands (cli_opts.h). */
#include "cli_opts.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void cli_pool_free(cli_pool *p) {
    for (int i = 0; i < p->n; i++) free(p->s[i]);
    free(p->s);
    *p = (cli_pool){0};
}

static const char *pool_add(cli_pool *p, const char *s) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        char **g = realloc(p->s, sizeof *g * (size_t)cap);
        if (!g) return NULL;
        p->s = g, p->cap = cap;
    }
    char *c = strdup(s);
    if (c) p->s[p->n++] = c;
    return c;
}

const cli_opt *cli_find(const cli_cmd *cmd, const char *name) {
    for (int i = 0; i < cmd->n_opts; i++)
        if (cmd->opts[i].type != CLI_SECTION && !strcmp(cmd->opts[i].name, name)) return &cmd->opts[i];
    return NULL;
}

static int takes_value(const cli_opt *o) { return o->type != CLI_BOOL && o->type != CLI_SET; }

/* Whether word is one of the '|'-separated words of list. */
static int is_choice(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; p; p = strchr(p, '|'), p = p ? p + 1 : NULL)
        if (!strncmp(p, word, n) && (p[n] == '|' || !p[n])) return 1;
    return 0;
}

/* "a, b or c" from "a|b|c". */
static void choice_words(const char *list, char *out, size_t cap) {
    size_t k = 0;
    out[0] = 0;
    for (const char *p = list; *p && k + 8 < cap; p++) {
        if (*p != '|') out[k++] = *p;
        else {
            const char *sep = strchr(p + 1, '|') ? ", " : " or ";
            for (; *sep && k + 1 < cap; sep++) out[k++] = *sep;
        }
    }
    out[k] = 0;
}

static int parse_int_range(const char *text, double lo, double hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || (double)v < lo || (double)v > hi) return 1;
    *out = v;
    return 0;
}

int cli_set(const cli_opt *o, void *dst, const char *text, const char *who, cli_pool *pool, char *err, size_t cap) {
    void *p = (char *)dst + o->off;
    long long x;
    switch (o->type) {
    case CLI_SECTION: break;
    case CLI_CHOICE:
        if (!is_choice(o->arg, text)) {
            char words[256];
            choice_words(o->arg, words, sizeof words);
            snprintf(err, cap, "%s: '%s' is not %s", who, text, words);
            return 1;
        }
        /* fall through */
    case CLI_STR:
    case CLI_STRS: {
        const char *s = pool ? pool_add(pool, text) : text;
        if (!s) return snprintf(err, cap, "out of memory"), 1;
        if (o->type != CLI_STRS) {
            *(const char **)p = s;
            return 0;
        }
        cli_strs *l = p;
        if (l->n == CLI_LIST_MAX) return snprintf(err, cap, "%s: at most %d values", who, CLI_LIST_MAX), 1;
        l->v[l->n++] = s;
        return 0;
    }
    case CLI_BOOL:
        if (!strcmp(text, "1") || !strcmp(text, "true")) *(int *)p = 1;
        else if (!strcmp(text, "0") || !strcmp(text, "false")) *(int *)p = 0;
        else return snprintf(err, cap, "%s: '%s' is not true or false", who, text), 1;
        return 0;
    case CLI_SET: *(int *)p = (int)o->lo; return 0;
    case CLI_INT:
    case CLI_I64:
        if (parse_int_range(text, o->lo, o->hi, &x))
            return snprintf(err, cap, "%s: '%s' is not an integer in [%.0f, %.0f]", who, text, o->lo, o->hi), 1;
        if (o->type == CLI_INT) *(int *)p = (int)x;
        else *(int64_t *)p = x;
        return 0;
    case CLI_F64: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        int open = (o->flags & CLI_LO_OPEN) != 0;
        if (errno || end == text || *end || !isfinite(v) || v < o->lo || (open && v == o->lo) || v > o->hi)
            return snprintf(err, cap, "%s: '%s' is not a number in %c%g, %g]", who, text, open ? '(' : '[', o->lo,
                            o->hi),
                   1;
        *(double *)p = v;
        return 0;
    }
    case CLI_INTS: {
        cli_ints l = {0};
        const char *s = text;
        for (;;) {
            char item[32];
            size_t n = strcspn(s, ",");
            if (l.n == CLI_LIST_MAX) return snprintf(err, cap, "%s: at most %d values", who, CLI_LIST_MAX), 1;
            snprintf(item, sizeof item, "%.*s", (int)(n < sizeof item - 1 ? n : sizeof item - 1), s);
            if (n >= sizeof item || parse_int_range(item, o->lo, o->hi, &x))
                return snprintf(err, cap, "%s: '%.*s' is not an integer in [%.0f, %.0f]", who, (int)n, s, o->lo, o->hi),
                       1;
            l.v[l.n++] = (int)x;
            if (!s[n]) break;
            s += n + 1;
        }
        *(cli_ints *)p = l;
        return 0;
    }
    }
    return snprintf(err, cap, "%s: not a setting", who), 1;
}

int cli_scan(const cli_cmd *cmd, const void *defaults, int argc, char **argv, cli_hit **hits, int *n_hits,
             int *operands) {
    struct option *lo = calloc((size_t)cmd->n_opts + 2, sizeof *lo);
    cli_hit *h = calloc((size_t)argc + 1, sizeof *h);
    int n = 0, c, rc = 0, help = 0;
    *hits = NULL, *n_hits = 0;
    if (!lo || !h) {
        free(lo), free(h);
        fprintf(stderr, "handgrad %s: out of memory\n", cmd->name);
        return 1;
    }
    for (int i = 0; i < cmd->n_opts; i++)
        if (cmd->opts[i].type != CLI_SECTION)
            lo[n++] = (struct option){cmd->opts[i].name, takes_value(&cmd->opts[i]) ? required_argument : no_argument, 0,
                                      1000 + i};
    lo[n] = (struct option){"help", no_argument, 0, 'h'};
    n = 0;
    optind = 1, opterr = 0; /* one-line messages of our own */
    while (!rc && (c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        const char *at = argv[optind - 1];
        if (c == 'h') {
            help = 1;
        } else if (c == ':') {
            fprintf(stderr, "handgrad %s: option '%s' needs a value (see handgrad %s --help)\n", cmd->name, at, cmd->name);
            rc = CLI_USAGE;
        } else if (c == '?') {
            const char *eq = strchr(at, '=');
            char name[128];
            snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - at - 2) : 0, at + 2);
            const cli_opt *o = eq && !strncmp(at, "--", 2) ? cli_find(cmd, name) : NULL;
            if (o && !takes_value(o))
                fprintf(stderr, "handgrad %s: option '--%s' takes no value (see handgrad %s --help)\n", cmd->name,
                        name, cmd->name);
            else
                fprintf(stderr, "handgrad %s: unknown option '%s' (see handgrad %s --help)\n", cmd->name, at, cmd->name);
            rc = CLI_USAGE;
        } else {
            const cli_opt *o = &cmd->opts[c - 1000];
            if (optarg && !(o->flags & CLI_TEXT) && !strncmp(optarg, "--", 2) && optarg[2]) {
                fprintf(stderr, "handgrad %s: option '--%s' needs a value, not '%s'\n", cmd->name, o->name, optarg);
                rc = CLI_USAGE;
            }
            h[n++] = (cli_hit){o, optarg};
        }
    }
    free(lo);
    if (!rc && !help && optind < argc && !operands) {
        fprintf(stderr, "handgrad %s: unexpected argument '%s' (options are --name value)\n", cmd->name, argv[optind]);
        rc = CLI_USAGE;
    }
    if (!rc && help) {
        cli_usage(cmd, defaults, stdout);
        rc = CLI_HELP;
    }
    if (operands) *operands = optind;
    if (rc) free(h);
    else *hits = h, *n_hits = n;
    return rc;
}

int cli_apply(const cli_cmd *cmd, void *dst, const cli_hit *hits, int n_hits) {
    for (int i = 0; i < n_hits; i++) {
        char who[80], err[600];
        snprintf(who, sizeof who, "--%s", hits[i].opt->name);
        if (cli_set(hits[i].opt, dst, hits[i].value ? hits[i].value : "1", who, NULL, err, sizeof err)) {
            fprintf(stderr, "handgrad %s: %s\n", cmd->name, err);
            return CLI_USAGE;
        }
    }
    return 0;
}

int cli_parse(const cli_cmd *cmd, void *dst, int argc, char **argv, int *operands) {
    cli_hit *h;
    int n, rc = cli_scan(cmd, dst, argc, argv, &h, &n, operands);
    if (rc) return rc;
    rc = cli_apply(cmd, dst, h, n);
    free(h);
    return rc;
}

int cli_apply_json(const cli_cmd *cmd, void *dst, cli_pool *pool, const char *name, const char *text, size_t len,
                   char *err, size_t cap) {
    const char *nul = memchr(text, 0, len), *end = NULL;
    if (nul) return snprintf(err, cap, "%s: byte %ld is a NUL byte; a config is JSON text", name, (long)(nul - text)), 1;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    while (j && end && end < text + len && strchr(" \t\r\n", *end)) end++;
    if (cJSON_IsObject(j) && end && end < text + len) {
        snprintf(err, cap, "%s: text after the JSON object at byte %ld", name, (long)(end - text));
        cJSON_Delete(j);
        return 1;
    }
    if (!cJSON_IsObject(j)) {
        const char *at = cJSON_GetErrorPtr();
        long off = j || !at || at < text || at > text + len ? -1 : (long)(at - text);
        if (off >= 0) snprintf(err, cap, "%s: not a valid JSON object (error near byte %ld)", name, off);
        else snprintf(err, cap, "%s: not a JSON object", name);
        cJSON_Delete(j);
        return 1;
    }
    int rc = 0;
    char who[300], num[64];
    for (const cJSON *e = j->child; e && !rc; e = e->next) {
        const cli_opt *o = cli_find(cmd, e->string);
        snprintf(who, sizeof who, "%s: key '%.200s'", name, e->string);
        if (!o || (o->flags & CLI_ARGV)) {
            snprintf(err, cap, "%s is not a setting (see handgrad %s --help)", who, cmd->name);
            rc = 1;
        } else if (cJSON_IsString(e)) {
            rc = cli_set(o, dst, e->valuestring, who, pool, err, cap);
        } else if (cJSON_IsBool(e)) {
            rc = cli_set(o, dst, cJSON_IsTrue(e) ? "true" : "false", who, pool, err, cap);
        } else if (cJSON_IsNumber(e) && o->type != CLI_STR && o->type != CLI_CHOICE) {
            snprintf(num, sizeof num, "%.17g", e->valuedouble);
            rc = cli_set(o, dst, num, who, pool, err, cap);
        } else {
            snprintf(err, cap, "%s: the value has the wrong type", who);
            rc = 1;
        }
    }
    cJSON_Delete(j);
    return rc;
}

char *cli_to_json(const cli_cmd *cmd, const void *src) {
    cJSON *j = cJSON_CreateObject();
    for (int i = 0; j && i < cmd->n_opts; i++) {
        const cli_opt *o = &cmd->opts[i];
        const void *p = (const char *)src + o->off;
        if (!(o->flags & CLI_SAVED)) continue;
        switch (o->type) {
        case CLI_STR:
        case CLI_CHOICE:
            if (*(const char *const *)p) cJSON_AddStringToObject(j, o->name, *(const char *const *)p);
            break;
        case CLI_BOOL: cJSON_AddBoolToObject(j, o->name, *(const int *)p); break;
        case CLI_INT: cJSON_AddNumberToObject(j, o->name, *(const int *)p); break;
        case CLI_I64: {
            char buf[32];
            if (*(const int64_t *)p < 0) break; /* unset */
            snprintf(buf, sizeof buf, "%lld", (long long)*(const int64_t *)p);
            cJSON_AddRawToObject(j, o->name, buf); /* exact beyond 2^53 */
            break;
        }
        case CLI_F64:
            if (*(const double *)p >= 0) cJSON_AddNumberToObject(j, o->name, *(const double *)p);
            break;
        case CLI_SECTION:
        case CLI_SET:
        case CLI_INTS:
        case CLI_STRS: break; /* no command saves these */
        }
    }
    char *s = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    return s;
}

#define NBSP '\x1f'

/* The default an option's help line shows: what dst holds, when that is something. */
static int default_text(const cli_opt *o, const void *dst, char *out, size_t cap) {
    const void *p = (const char *)dst + o->off;
    const int zero = (o->flags & CLI_SHOW0) != 0;
    out[0] = 0;
    if (!dst || strstr(o->help, "default")) return 0; /* the help says it */
    switch (o->type) {
    case CLI_STR:
    case CLI_CHOICE:
        if (*(const char *const *)p) snprintf(out, cap, "%s", *(const char *const *)p);
        break;
    case CLI_INT:
        if (*(const int *)p || zero) snprintf(out, cap, "%d", *(const int *)p);
        break;
    case CLI_I64:
        if (*(const int64_t *)p || zero) snprintf(out, cap, "%lld", (long long)*(const int64_t *)p);
        break;
    case CLI_F64:
        if (*(const double *)p || zero) snprintf(out, cap, "%g", *(const double *)p);
        break;
    default: break;
    }
    return out[0] != 0;
}

/* Writes text from column `col` (the cursor is there), wrapped before column 80, each
 * further line indented to `indent`; NBSP (a 0x1f byte) joins words as a space does not. */
static void wrap(FILE *f, const char *text, int col, int indent) {
    const char *p = text;
    while (*p) {
        size_t word = strcspn(p, " ");
        if (col > indent && col + 1 + (int)word > 80) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        for (size_t k = 0; k < word; k++) fputc(p[k] == NBSP ? ' ' : p[k], f);
        col += (int)word;
        p += word;
        while (*p == ' ') p++;
    }
    fputc('\n', f);
}

/* Paragraphs (one per line of text), each wrapped to 80 columns, after a blank line. */
static void paragraphs(FILE *f, const char *text) {
    if (!text) return;
    char line[2048];
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)n, p);
        fputc('\n', f);
        wrap(f, line, 0, 0);
        p += n + (p[n] == '\n');
    }
}

void cli_usage(const cli_cmd *cmd, const void *dst, FILE *f) {
    enum { FLAG_COL = 24 };
    fputs(cmd->synopsis, f);
    paragraphs(f, cmd->about);
    if (cmd->opts[0].type != CLI_SECTION) fputs("\noptions:\n", f);
    char flag[128], def[160], line[1200];
    for (int i = 0; i < cmd->n_opts; i++) {
        const cli_opt *o = &cmd->opts[i];
        if (o->type == CLI_SECTION) {
            fprintf(f, "\n%s:\n", o->name);
            continue;
        }
        if (o->flags & CLI_HIDDEN) continue;
        snprintf(flag, sizeof flag, "  --%s%s%s", o->name, takes_value(o) ? " " : "", takes_value(o) ? o->arg : "");
        fputs(flag, f);
        int col = (int)strlen(flag);
        if (col >= FLAG_COL) {
            fprintf(f, "\n%*s", FLAG_COL + 1, "");
        } else {
            fprintf(f, "%*s", FLAG_COL + 1 - col, "");
        }
        if (default_text(o, dst, def, sizeof def)) snprintf(line, sizeof line, "%s (default%c%s)", o->help, NBSP, def);
        else snprintf(line, sizeof line, "%s", o->help);
        wrap(f, line, FLAG_COL + 1, FLAG_COL + 1);
    }
    fprintf(f, "  %-*s %s\n", FLAG_COL - 2, "--help, -h", "this text");
    fprintf(f, "  %-*s %s\n", FLAG_COL - 2, "--version", "handgrad's version");
    paragraphs(f, cmd->epilog);
}
