/* Chat templates: the Jinja2 `chat_template` of a Hugging Face tokenizer_config.json,
 * rendered as transformers' apply_chat_template(..., tokenize=False) renders it, so that
 * `prepare --chat` writes conversations in the model's own format without Python.
 *
 * The renderer implements the subset of Jinja2 that real chat templates use, in
 * transformers' environment (trim_blocks, lstrip_blocks, the loopcontrols extension, the
 * globals raise_exception, strftime_now and namespace, and its `{% generation %}` tag):
 *   - {{ }}, {% %}, {# #} with whitespace control (-, +); a template's one trailing
 *     newline is dropped and \r\n, \r read as \n, as Jinja does;
 *   - if/elif/else, for (tuple targets, an `if` filter, else, loop.index, index0,
 *     revindex, revindex0, first, last, length, previtem, nextitem), break, continue,
 *     set (a name, names, namespace attributes, {% set x %}...{% endset %}), generation;
 *   - literals (strings with Python escapes, decimal integers, true/false/none, lists,
 *     tuples, dicts), names, a.b, a[i], slices a[i:j:k], calls, filters, tests, the
 *     operators + - * // % ** ~ == != < > <= >= in, not in, and, or, not, x if c else y;
 *   - filters trim, length, count, upper, lower (ASCII), default (d), string, join,
 *     first, last, replace, list; tests defined, undefined, none, string, number,
 *     integer, boolean, true, false, mapping, iterable, sequence, callable, odd, even,
 *     divisibleby, eq (equalto, ==), ne (!=); methods strip, lstrip, rstrip, startswith,
 *     endswith, upper, lower (ASCII) on strings and get on dicts; the functions
 *     raise_exception, strftime_now, namespace and range.
 * Values follow Python: None/bool/int/str/list/tuple/dict/namespace, with Jinja's
 * Undefined (prints as nothing, is false, fails when used as a value otherwise).
 *
 * Anything else is refused by name rather than rendered differently: an unknown filter
 * or test, or an unknown statement when the template is compiled (as Jinja does); a
 * filter, test, method or function that Jinja has but this renderer does not (tojson,
 * items, map, ...) when the render reaches it, so templates whose tool-calling branches
 * use them still render tool-free conversations. Floats, macros, include/import,
 * {% raw %} and `%` string formatting are refused too. Every error names the template
 * (`where`) and its line: "tokenizer_config.json chat_template: line 3: filter 'tojson'
 * is not implemented". raise_exception('...') in a template fails the render with
 * HG_ERR_INVALID and the template's message.
 *
 * What the template sees is what transformers passes for a tool-free conversation:
 * messages (a list of {'role': ..., 'content': ...} dicts, a NULL field left out),
 * add_generation_prompt, tools = none, documents = none, bos_token and eos_token when
 * set, and date_string when set. Renders are bounded: HG_CHAT_MAX_OUTPUT bytes of
 * output (and of any string), HG_CHAT_MAX_ITERATIONS loop iterations, HG_CHAT_MAX_MEMORY
 * bytes of values (intermediate strings included: a template that grows a string in a
 * namespace over a long conversation copies it each time), 2^32 steps and bytes scanned
 * (which bounds the time), and nesting limits at compile time. A compiled template is
 * read-only: renders may run on several threads at once. */
#ifndef HG_DATA_CHAT_TEMPLATE_H
#define HG_DATA_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

#define HG_CHAT_MAX_OUTPUT ((size_t)64 << 20)
#define HG_CHAT_MAX_ITERATIONS 1000000
#define HG_CHAT_MAX_MEMORY ((size_t)256 << 20)
#define HG_CHAT_MAX_SOURCE ((size_t)1 << 20)

typedef struct hg_chat_template hg_chat_template;

/* One message; a NULL field is absent from the message's dict. Text is UTF-8. */
typedef struct hg_chat_msg {
    const char *role, *content;
} hg_chat_msg;

typedef struct hg_chat_vars {
    const char *bos_token, *eos_token; /* NULL: undefined in the template */
    int add_generation_prompt;
    /* Llama 3.x templates print "Today Date: <date_string>" and, when it is undefined,
     * strftime_now("%d %b %Y") (transformers passes it when the caller does). NULL:
     * undefined. */
    const char *date_string;
    /* The time strftime_now() formats, in seconds since the epoch, shown in local time
     * in the C locale as Python's datetime.now().strftime does; 0: the current time. */
    int64_t now;
} hg_chat_vars;

/* Parses template source src (len bytes); `where` names it in errors (a file path).
 * HG_ERR_FORMAT for a malformed template, HG_ERR_UNSUPPORTED for a construct this
 * renderer does not implement, both naming the line. */
hg_status hg_chat_template_compile(const char *src, size_t len, const char *where, hg_chat_template **out);
void hg_chat_template_free(hg_chat_template *t);

/* Renders messages[0..n) into a malloc'd NUL-terminated string (*out, *out_len); the
 * caller frees *out. vars may be NULL (no bos/eos, no generation prompt). On failure
 * *out is NULL: HG_ERR_INVALID for an empty conversation, text that is not UTF-8, a
 * template's raise_exception or a runtime error of the template (an undefined value
 * used, a type mismatch) or a limit passed; HG_ERR_UNSUPPORTED for a construct not
 * implemented. */
hg_status hg_chat_template_render(const hg_chat_template *t, const hg_chat_msg *msgs, int n,
                                  const hg_chat_vars *vars, char **out, size_t *out_len);

#endif
