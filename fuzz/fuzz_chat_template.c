/* Fuzz target: a chat template (data/chat_template.h) must compile or be refused with a
 * status, and every template that compiles must render the fixed conversations below or
 * fail with a status, within the renderer's limits: the output is NUL-terminated at
 * out_len, no longer than HG_CHAT_MAX_OUTPUT, and the same when rendered twice. The first
 * byte chooses the variables (add_generation_prompt, bos/eos, date_string); the rest is
 * the template. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat_template.h"
#include "handgrad.h"

static const hg_chat_msg conv[] = {
    {"system", "You are helpful."}, {"user", "  Hi \xe3\x80\x80there\n"}, {"assistant", "Hello!"},
    {"user", "Bye"},                {"tool", NULL},                        {NULL, "orphan"},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    uint8_t flags = data[0];
    hg_chat_template *t = NULL;
    if (hg_chat_template_compile((const char *)data + 1, size - 1, "fuzz.jinja", &t) != HG_OK) {
        if (t) __builtin_trap();
        return 0;
    }
    hg_chat_vars v = {.bos_token = flags & 2 ? "<s>" : NULL,
                      .eos_token = flags & 4 ? "</s>" : NULL,
                      .add_generation_prompt = flags & 1,
                      .date_string = flags & 8 ? "26 Jul 2024" : NULL,
                      .now = 1741944413};
    int n = flags & 16 ? 6 : 4;
    const hg_chat_msg *msgs = flags & 32 ? conv + 1 : conv;
    if (flags & 32) n--;
    char *a = NULL, *b = NULL;
    size_t an = 0, bn = 0;
    hg_status sa = hg_chat_template_render(t, msgs, n, &v, &a, &an);
    hg_status sb = hg_chat_template_render(t, msgs, n, &v, &b, &bn);
    if (sa != sb) __builtin_trap();
    if (sa == HG_OK) {
        if (!a || !b || an > HG_CHAT_MAX_OUTPUT || a[an] != '\0' || an != bn || memcmp(a, b, an)) __builtin_trap();
    } else if (a || b) {
        __builtin_trap();
    }
    free(a);
    free(b);
    hg_chat_template_free(t);
    return 0;
}
