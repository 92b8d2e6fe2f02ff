/* tiktoken rank files: one "base64(token bytes) rank" per line. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/fileio.h"
#include "data/tokenizer.h"
#include "data/vocab.h"

static int base64_value(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes standard padded base64 s[0..n) into out (room for 3n/4); returns the
 * length, or -1 with *bad at the offending character. */
static long base64_decode(const uint8_t *s, size_t n, uint8_t *out, size_t *bad) {
    if (n == 0 || n % 4) {
        *bad = n;
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            int last_group = i + 4 == n;
            if (s[i + k] == '=' && last_group && k >= 2 && (k == 3 || s[i + 3] == '=')) {
                v[k] = 0;
                pad++;
                continue;
            }
            v[k] = base64_value(s[i + k]);
            if (v[k] < 0 || pad) {
                *bad = i + (size_t)k;
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
    }
    return (long)o;
}

static int is_blank(uint8_t c) { return c == ' ' || c == '\t' || c == '\r'; }

hg_status vocab_parse_tiktoken(hg_tokenizer **out, const uint8_t *buf, size_t len, const char *name) {
    *out = NULL;
    /* Upper bound on tokens: lines. */
    size_t max_tokens = 1;
    for (size_t i = 0; i < len; i++) max_tokens += buf[i] == '\n';
    if (max_tokens > (1u << 30)) return hg_fail(HG_ERR_FORMAT, "%s: too many lines", name);
    uint8_t *blob = malloc(len + HG_EOT_LEN + 1);
    const uint8_t **bytes = malloc((max_tokens + 1) * sizeof *bytes);
    uint32_t *lens = malloc((max_tokens + 1) * sizeof *lens);
    size_t *line_of = malloc((max_tokens + 1) * sizeof *line_of);
    int64_t *rank_line = malloc((max_tokens + 1) * sizeof *rank_line); /* by rank: 0 when unseen */
    hg_status s = HG_OK;
    hg_tokenizer *t = NULL;
    if (!blob || !bytes || !lens || !line_of || !rank_line) {
        s = hg_fail(HG_ERR_NOMEM, "%s: out of memory", name);
        goto done;
    }
    memset(rank_line, 0, (max_tokens + 1) * sizeof *rank_line);
    size_t n = 0, used = 0, line = 0;
    for (size_t pos = 0; pos < len;) {
        line++;
        const uint8_t *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len, next = nl ? end + 1 : len;
        size_t line_start = pos, a = pos;
        while (a < end && is_blank(buf[a])) a++;
        size_t tok_end = a;
        while (tok_end < end && !is_blank(buf[tok_end])) tok_end++;
        size_t b = tok_end;
        while (b < end && is_blank(buf[b])) b++;
        size_t rank_end = b;
        while (rank_end < end && !is_blank(buf[rank_end])) rank_end++;
        size_t tail = rank_end;
        while (tail < end && is_blank(buf[tail])) tail++;
        pos = next;
        if (a == end) continue; /* blank line */
        if (b == end || tail != end) {
            s = hg_fail(HG_ERR_FORMAT, "%s:%zu: want \"<base64 token> <rank>\"", name, line);
            goto done;
        }
        uint64_t rank = 0;
        for (size_t i = b; i < rank_end; i++) {
            if (buf[i] < '0' || buf[i] > '9' || rank > (1u << 30)) {
                s = hg_fail(HG_ERR_FORMAT, "%s:%zu: rank \"%.*s\" is not a number below 2^30", name, line,
                            (int)(rank_end - b > 20 ? 20 : rank_end - b), (const char *)buf + b);
                goto done;
            }
            rank = rank * 10 + (uint64_t)(buf[i] - '0');
        }
        size_t bad = 0;
        long k = base64_decode(buf + a, tok_end - a, blob + used, &bad);
        if (k <= 0) {
            s = hg_fail(HG_ERR_FORMAT, "%s:%zu: column %zu: bad base64 token", name, line, a - line_start + bad + 1);
            goto done;
        }
        if (rank >= max_tokens) {
            s = hg_fail(HG_ERR_FORMAT, "%s:%zu: rank %llu, but ranks must run 0..N-1 over the file's tokens", name,
                        line, (unsigned long long)rank);
            goto done;
        }
        if (rank_line[rank]) {
            s = hg_fail(HG_ERR_FORMAT, "%s:%zu: rank %llu is already taken on line %lld", name, line,
                        (unsigned long long)rank, (long long)rank_line[rank]);
            goto done;
        }
        rank_line[rank] = (int64_t)line;
        bytes[rank] = blob + used;
        lens[rank] = (uint32_t)k;
        line_of[rank] = line;
        used += (size_t)k;
        n++;
    }
    for (size_t r = 0; r < n; r++) {
        if (!rank_line[r]) {
            s = hg_fail(HG_ERR_FORMAT, "%s: rank %zu is missing; ranks must run 0..%zu", name, r, n - 1);
            goto done;
        }
    }
    memcpy(blob + used, HG_EOT_TEXT, HG_EOT_LEN);
    bytes[n] = blob + used;
    lens[n] = HG_EOT_LEN;
    s = tok_create(&t, (int32_t)n + 1, bytes, lens, (int32_t)n, name);
    if (s != HG_OK) goto done;
    for (size_t r = 0; r < n; r++) {
        int32_t holder = bytes_table_get(&t->by_bytes, bytes[r], lens[r]);
        if (holder != (int32_t)r) {
            s = hg_fail(HG_ERR_FORMAT, "%s:%zu: the same token as line %zu", name, line_of[r], line_of[holder]);
            goto done;
        }
    }
    s = tok_build_ranks(t, name);
done:
    if (s != HG_OK) {
        hg_tokenizer_free(t);
        t = NULL;
    }
    free(blob);
    free(bytes);
    free(lens);
    free(line_of);
    free(rank_line);
    *out = t;
    return s;
}

hg_status hg_tokenizer_load_tiktoken(hg_tokenizer **out, const char *path) {
    return vocab_load_file(out, path, vocab_parse_tiktoken);
}
