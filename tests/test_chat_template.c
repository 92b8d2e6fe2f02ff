/* Chat templates against transformers (src/data/chat_template.c):
 *   - the real templates of seven models (Llama 3.1 and 3.2, Qwen2.5, Gemma 2, Phi-3.5,
 *     OLMo 2, SmolLM2) and small templates pinning Jinja's semantics, each rendered over
 *     several conversations with add_generation_prompt off and on, must equal byte for
 *     byte what transformers' apply_chat_template(tokenize=False) returned
 *     (fixtures/chat_templates/expected.json, made by tools/make_chat_template_fixtures.py),
 *     and where the template raised (Gemma 2 refuses a system turn) fail with its message;
 *   - refusals name the template, the line and the construct: unknown and unimplemented
 *     filters and statements, unbalanced blocks, raise_exception, runtime errors;
 *   - the limits (output size, loop iterations, string size, nesting) hold, and bad input
 *     (an empty conversation, text that is not UTF-8) is refused. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "data/chat_template.h"
#include "data/fileio.h"

#define DIR "fixtures/chat_templates" /* ctest runs the tests in tests/ */

static const hg_chat_msg CONV[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};

/* Prints where got and want first differ. */
static int same_text(const char *what, const char *got, size_t gn, const char *want, size_t wn) {
    if (gn == wn && !memcmp(got, want, gn)) return 1;
    size_t i = 0;
    while (i < gn && i < wn && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "%s: differs at byte %zu (got %zu bytes, want %zu)\n  got:  \"%.*s\"\n  want: \"%.*s\"\n", what, i,
            gn, wn, (int)((gn - from) < 120 ? gn - from : 120), got + from, (int)((wn - from) < 120 ? wn - from : 120),
            want + from);
    return 0;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Every case of expected.json; returns the number rendered as transformers did. */
static int test_expected(void) {
    uint8_t *text;
    size_t len;
    CHECK_OK(file_read_all(DIR "/expected.json", &text, &len));
    cJSON *doc = cJSON_ParseWithLength((const char *)text, len);
    free(text);
    CHECK(doc != NULL);
    if (!doc) return 0;
    const cJSON *templates = cJSON_GetObjectItemCaseSensitive(doc, "templates");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases"), *c;
    const cJSON *now = cJSON_GetObjectItemCaseSensitive(doc, "now");
    CHECK(cJSON_IsObject(templates) && cJSON_IsArray(cases) && cJSON_IsNumber(now));
    int matched = 0, raised = 0, total = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *key = str_of(c, "template"), *name = str_of(c, "name"), *source = str_of(c, "source");
        const cJSON *fam = cJSON_GetObjectItemCaseSensitive(templates, key ? key : "");
        const char *file = str_of(fam, "file"), *want = str_of(c, "output"), *error = str_of(c, "error");
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages"), *m;
        char where[256], label[320];
        uint8_t *src = NULL;
        size_t src_len = 0;
        total++;
        CHECK(key && name && fam && (file || source) && (want || error) && cJSON_IsArray(msgs));
        if (!key || !name || !fam || !(file || source) || !(want || error) || !cJSON_IsArray(msgs)) continue;
        snprintf(where, sizeof where, "%s/%s", file ? DIR : "features", file ? file : name);
        snprintf(label, sizeof label, "%s %s agp=%d", key, name,
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")));
        if (file) CHECK_OK(file_read_all(where, &src, &src_len));
        hg_chat_template *t = NULL;
        CHECK_OK(hg_chat_template_compile(file ? (const char *)src : source, file ? src_len : strlen(source), where, &t));
        free(src);
        if (!t) continue;
        hg_chat_msg ms[16];
        int n = 0;
        cJSON_ArrayForEach(m, msgs) {
            if (n < 16) ms[n].role = str_of(m, "role"), ms[n].content = str_of(m, "content");
            n++;
        }
        CHECK(n <= 16);
        hg_chat_vars v = {.bos_token = str_of(fam, "bos_token"),
                          .eos_token = str_of(fam, "eos_token"),
                          .add_generation_prompt =
                              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")),
                          .date_string = str_of(c, "date_string"),
                          .now = (int64_t)now->valuedouble};
        char *out = NULL;
        size_t out_len = 0;
        hg_status st = hg_chat_template_render(t, ms, n < 16 ? n : 16, &v, &out, &out_len);
        if (want) {
            if (st != HG_OK) {
                fprintf(stderr, "%s: %s\n", label, hg_last_error());
                check_failures++;
            } else if (same_text(label, out, out_len, want, strlen(want)) && strlen(out) == out_len) {
                matched++;
            } else {
                check_failures++;
            }
        } else {
            /* transformers' message, and ours names the template and the line */
            if (st != HG_ERR_INVALID || !strstr(hg_last_error(), error) || !strstr(hg_last_error(), where) ||
                !strstr(hg_last_error(), ": line ")) {
                fprintf(stderr, "%s: got %s '%s', want a failure with '%s'\n", label, hg_status_name(st),
                        hg_last_error(), error);
                check_failures++;
            } else {
                raised++;
            }
            CHECK(out == NULL);
        }
        free(out);
        hg_chat_template_free(t);
    }
    printf("expected.json: %d of %d cases as transformers %s renders them (%d raise)\n", matched + raised, total,
           str_of(doc, "transformers") ? str_of(doc, "transformers") : "?", raised);
    CHECK(total >= 100 && raised >= 4 && matched + raised == total);
    cJSON_Delete(doc);
    return matched;
}

static hg_status render_src(const char *src, const hg_chat_msg *msgs, int n, char **out) {
    hg_chat_template *t = NULL;
    size_t len;
    *out = NULL;
    hg_status st = hg_chat_template_compile(src, strlen(src), "t.jinja", &t);
    if (st != HG_OK) return st;
    hg_chat_vars v = {.bos_token = "<s>", .eos_token = "</s>", .now = 1741944413};
    st = hg_chat_template_render(t, msgs, n, &v, out, &len);
    hg_chat_template_free(t);
    return st;
}

/* The template fails with status want and exactly the message msg. */
static void expect_error(const char *src, hg_status want, const char *msg, int line) {
    char *out;
    hg_status st = render_src(src, CONV + 1, 3, &out);
    if (st != want || strcmp(hg_last_error(), msg)) {
        fprintf(stderr, "%s:%d: got %s '%s', want %s '%s'\n", __FILE__, line, hg_status_name(st), hg_last_error(),
                hg_status_name(want), msg);
        check_failures++;
    }
    if (out) {
        fprintf(stderr, "%s:%d: output despite the failure\n", __FILE__, line);
        check_failures++;
        free(out);
    }
}
#define EXPECT_ERROR(src, want, msg) expect_error((src), (want), (msg), __LINE__)

static void test_refusals(void) {
    /* compile time: as Jinja, unknown filters, tests and statements */
    EXPECT_ERROR("{{ 'a' }}\n{{ messages | frobnicate }}", HG_ERR_FORMAT, "t.jinja: line 2: no filter named 'frobnicate'");
    EXPECT_ERROR("{% if x is frob %}{% endif %}", HG_ERR_FORMAT, "t.jinja: line 1: no test named 'frob'");
    EXPECT_ERROR("x\n{% frob %}", HG_ERR_FORMAT, "t.jinja: line 2: unknown statement 'frob'");
    EXPECT_ERROR("{% macro f() %}{% endmacro %}", HG_ERR_UNSUPPORTED,
                 "t.jinja: line 1: statement 'macro' is not implemented");
    EXPECT_ERROR("\n{% include 'x' %}", HG_ERR_UNSUPPORTED, "t.jinja: line 2: statement 'include' is not implemented");
    EXPECT_ERROR("{% raw %}{{{% endraw %}", HG_ERR_UNSUPPORTED, "t.jinja: line 1: statement 'raw' is not implemented");
    EXPECT_ERROR("{{ 1.5 }}", HG_ERR_UNSUPPORTED, "t.jinja: line 1: float numbers are not implemented");
    /* unbalanced blocks and tags */
    EXPECT_ERROR("{% if true %}\nabc", HG_ERR_FORMAT, "t.jinja: line 1: 'if' is never closed (missing 'endif')");
    EXPECT_ERROR("{% for m in messages %}\n{% if true %}{% endif %}", HG_ERR_FORMAT,
                 "t.jinja: line 1: 'for' is never closed (missing 'endfor')");
    EXPECT_ERROR("a\n\n{% endif %}", HG_ERR_FORMAT, "t.jinja: line 3: 'endif' without an open block");
    EXPECT_ERROR("{% for m in messages %}\n{% endif %}", HG_ERR_FORMAT,
                 "t.jinja: line 2: 'endif' where the 'for' of line 1 is still open");
    EXPECT_ERROR("{% if true %}{% else %}{% else %}{% endif %}", HG_ERR_FORMAT,
                 "t.jinja: line 1: 'else' where the 'if' of line 1 is still open");
    EXPECT_ERROR("\n{{ 'a' ", HG_ERR_FORMAT, "t.jinja: line 2: '{{' is never closed (missing '}}')");
    EXPECT_ERROR("{# x", HG_ERR_FORMAT, "t.jinja: line 1: '{#' is never closed (missing '#}')");
    EXPECT_ERROR("{{ (1 }}", HG_ERR_FORMAT, "t.jinja: line 1: unexpected '}', expected ')'");
    EXPECT_ERROR("{{ 1 ) }}", HG_ERR_FORMAT, "t.jinja: line 1: unexpected ')'");
    EXPECT_ERROR("{% break %}", HG_ERR_FORMAT, "t.jinja: line 1: 'break' outside a for loop");
    /* render time: what Jinja has and this renderer does not, named with the line */
    EXPECT_ERROR("{{ 'a' }}\n\n{{ messages | tojson }}", HG_ERR_UNSUPPORTED,
                 "t.jinja: line 3: filter 'tojson' is not implemented");
    EXPECT_ERROR("{% if false %}{{ x | tojson }}{% endif %}ok{{ 4 / 2 }}", HG_ERR_UNSUPPORTED,
                 "t.jinja: line 1: '/' gives a float, and floats are not implemented");
    EXPECT_ERROR("{{ 'a %s' % 'b' }}", HG_ERR_UNSUPPORTED, "t.jinja: line 1: string formatting with '%' is not implemented");
    EXPECT_ERROR("{{ 'x'.split() }}", HG_ERR_UNSUPPORTED, "t.jinja: line 1: method 'split' of a str is not implemented");
    EXPECT_ERROR("{{ dict(a=1) }}", HG_ERR_UNSUPPORTED, "t.jinja: line 1: function 'dict' is not implemented");
    EXPECT_ERROR("{{ 'ÄB' | lower }}", HG_ERR_UNSUPPORTED, "t.jinja: line 1: lower of non-ASCII text is not implemented");
    /* the template's own errors */
    EXPECT_ERROR("line 1\n{{ raise_exception('no ' ~ messages[0].role) }}", HG_ERR_INVALID,
                 "t.jinja: line 2: raise_exception: no user");
    EXPECT_ERROR("\n\n{{ nothing.attr }}", HG_ERR_INVALID, "t.jinja: line 3: 'nothing' is undefined");
    EXPECT_ERROR("{{ messages[0].tools[0] }}", HG_ERR_INVALID, "t.jinja: line 1: 'tools' is undefined");
    EXPECT_ERROR("{{ 'a' + 1 }}", HG_ERR_INVALID, "t.jinja: line 1: unsupported operand types for +: 'str' and 'int'");
    EXPECT_ERROR("{{ 'a' + nothing }}", HG_ERR_INVALID, "t.jinja: line 1: 'nothing' is undefined");
    EXPECT_ERROR("{{ 1 // 0 }}", HG_ERR_INVALID, "t.jinja: line 1: integer division or modulo by zero");
    EXPECT_ERROR("{% for x in 3 %}{% endfor %}", HG_ERR_INVALID, "t.jinja: line 1: 'int' object is not iterable");
    EXPECT_ERROR("{% set ns = namespace(_x=1) %}", HG_ERR_INVALID,
                 "t.jinja: line 1: namespace attribute '_x': names starting with '_' are refused");

    /* Gemma 2 refuses a system turn with raise_exception, on its line 1 */
    uint8_t *src;
    size_t len;
    hg_chat_template *t = NULL;
    CHECK_OK(file_read_all(DIR "/gemma2.jinja", &src, &len));
    CHECK_OK(hg_chat_template_compile((const char *)src, len, "tokenizer_config.json chat_template", &t));
    free(src);
    char *out = NULL;
    size_t out_len;
    hg_chat_vars v = {.bos_token = "<bos>", .eos_token = "<eos>"};
    CHECK(t && hg_chat_template_render(t, CONV, 2, &v, &out, &out_len) == HG_ERR_INVALID && !out);
    CHECK(!strcmp(hg_last_error(),
                  "tokenizer_config.json chat_template: line 1: raise_exception: System role not supported"));
    /* bad input */
    CHECK_FAILS(hg_chat_template_render(t, CONV, 0, &v, &out, &out_len), HG_ERR_INVALID, "empty conversation");
    hg_chat_msg bad[] = {{"user", "caf\xc3"}};
    CHECK_FAILS(hg_chat_template_render(t, bad, 1, &v, &out, &out_len), HG_ERR_INVALID,
                "message 0's content is not valid UTF-8");
    /* a NULL field is absent: Undefined, which trim turns into "" but '+' refuses */
    hg_chat_msg no_content[] = {{"user", NULL}};
    CHECK(hg_chat_template_render(t, no_content, 1, &v, &out, &out_len) == HG_OK && out &&
          !strcmp(out, "<bos><start_of_turn>user\n<end_of_turn>\n"));
    free(out);
    CHECK(render_src("\n{{ 'a' + messages[0].content }}", no_content, 1, &out) == HG_ERR_INVALID && !out &&
          !strcmp(hg_last_error(), "t.jinja: line 2: 'content' is undefined"));
    CHECK(hg_chat_template_render(t, CONV + 1, 1, NULL, &out, &out_len) == HG_OK && out &&
          !strcmp(out, "<start_of_turn>user\nHi<end_of_turn>\n")); /* no vars: bos_token undefined prints nothing */
    free(out);
    hg_chat_template_free(t);
    CHECK_FAILS(hg_chat_template_compile("{{ 'caf\xc3' }}", strlen("{{ 'caf\xc3' }}"), "bad.jinja", &t), HG_ERR_FORMAT,
                "bad.jinja: line 1: the template is not valid UTF-8");
    CHECK(t == NULL);
}

static void test_limits(void) {
    char *out;
    hg_status st;
    st = render_src("{% set s = 'x' * 40000000 %}{{ s }}\n{{ s }}", CONV + 1, 1, &out);
    CHECK(st == HG_ERR_INVALID && strstr(hg_last_error(), "line 2: the rendered text is longer than 64 MiB") && !out);
    st = render_src("{% for a in range(2000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", CONV + 1, 1, &out);
    CHECK(st == HG_ERR_INVALID && strstr(hg_last_error(), "more than 1000000 loop iterations") && !out);
    st = render_src("{% set s = 'x' * 40000000 %}{% for i in range(4) %}{% set t = s ~ s %}{% endfor %}",
                    CONV + 1, 1, &out);
    CHECK(st == HG_ERR_INVALID && strstr(hg_last_error(), "a string longer than 64 MiB") && !out);
    st = render_src("{{ range(100001) | length }}", CONV + 1, 1, &out);
    CHECK(st == HG_ERR_INVALID && strstr(hg_last_error(), "range() of more than 100000 items") && !out);
    st = render_src("{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = [ns.l] %}{% endfor %}",
                    CONV + 1, 1, &out);
    CHECK(st == HG_ERR_INVALID && strstr(hg_last_error(), "nested more than 64 deep") && !out);
    /* time: a scan of a long string in every iteration runs out of the work budget */
    st = render_src("{% set s = 'x' * 40000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}",
                    CONV + 1, 1, &out);
    CHECK(st == HG_ERR_INVALID && strstr(hg_last_error(), "line 1: the template does too much work") && !out);
    CHECK(render_src("[{{ '' * 888888888885 }}]", CONV + 1, 1, &out) == HG_OK && out && !strcmp(out, "[]"));
    free(out);
    CHECK(render_src("{{ 9223372036854775807 + 1 }}", CONV + 1, 1, &out) == HG_ERR_UNSUPPORTED && !out);
    CHECK(render_src("{{ -9223372036854775807 - 2 }}", CONV + 1, 1, &out) == HG_ERR_UNSUPPORTED && !out);

    /* nesting: brackets, unary signs, chains and blocks */
    size_t big = 200000;
    char *src = malloc(big + 64);
    CHECK(src != NULL);
    if (!src) return;
    for (int kind = 0; kind < 5; kind++) {
        size_t n = 0;
        const char *open = kind == 0 ? "(" : kind == 1 ? "-" : kind == 2 ? "1 + " : kind == 3 ? "{% if true %}" : "not ";
        n += (size_t)sprintf(src + n, kind == 3 ? "" : "{{ ");
        while (n + 16 < big) n += (size_t)sprintf(src + n, "%s", open);
        n += (size_t)sprintf(src + n, kind == 3 ? "x" : "1 }}");
        hg_chat_template *t = (hg_chat_template *)1;
        st = hg_chat_template_compile(src, n, "deep.jinja", &t);
        CHECK(st == HG_ERR_FORMAT && t == NULL && strstr(hg_last_error(), "deep.jinja: line 1: ") &&
              strstr(hg_last_error(), "nested too deeply"));
        if (st != HG_ERR_FORMAT) fprintf(stderr, "nesting kind %d: %s\n", kind, hg_last_error());
    }
    free(src);
    hg_chat_template *t = (hg_chat_template *)1;
    char *huge = calloc(HG_CHAT_MAX_SOURCE + 2, 1);
    CHECK(huge != NULL);
    if (huge) {
        memset(huge, 'a', HG_CHAT_MAX_SOURCE + 1);
        CHECK_FAILS(hg_chat_template_compile(huge, HG_CHAT_MAX_SOURCE + 1, "huge.jinja", &t), HG_ERR_INVALID, "huge.jinja");
        CHECK(t == NULL);
        free(huge);
    }
}

/* With no time given, strftime_now formats the current date (Llama 3.2's default). */
static void test_today(void) {
    uint8_t *src;
    size_t len, out_len;
    hg_chat_template *t = NULL;
    CHECK_OK(file_read_all(DIR "/llama3.2.jinja", &src, &len));
    CHECK_OK(hg_chat_template_compile((const char *)src, len, "llama3.2.jinja", &t));
    free(src);
    if (!t) return;
    char before[64], after[64], *out = NULL;
    struct tm tm;
    time_t now = time(NULL);
    strftime(before, sizeof before, "Today Date: %d %b %Y\n", localtime_r(&now, &tm));
    hg_chat_vars v = {.bos_token = "<|begin_of_text|>", .eos_token = "<|eot_id|>"};
    CHECK_OK(hg_chat_template_render(t, CONV + 1, 1, &v, &out, &out_len));
    now = time(NULL);
    strftime(after, sizeof after, "Today Date: %d %b %Y\n", localtime_r(&now, &tm));
    CHECK(out && (strstr(out, before) || strstr(out, after)));
    free(out);
    hg_chat_template_free(t);
}

int main(void) {
    setenv("TZ", "UTC", 1); /* the fixtures' strftime_now time is UTC */
    tzset();
    test_expected();
    test_refusals();
    test_limits();
    test_today();
    CHECK_DONE();
}
