/* Fuzz target: a line of `prepare --chat`'s JSONL (prep_chat_record) must be refused with
 * a status or give a record whose flags are sound: the first token starts the record and
 * is no target, no other token starts one, only the two known bits are set, every id is
 * a token. The first input byte picks --train-on; the template is ChatML's, rendered by
 * the real renderer, on a small tokenizer trained here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/prepare.h"
#include "fuzz_tokenizer.h"
#include "handgrad_data.h"

static hg_tokenizer *tok;
static prep_chat *chat;

static const char chatml[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static const char corpus[] = "<|im_start|>user\nWho wrote it?<|im_end|>\n<|im_start|>assistant\nMoses, by "
                                 "tradition.<|im_end|>\n caf\xc3\xa9 {\"messages\": [{\"role\": \"user\"}]} 12345\n";
    tok = fuzz_tokenizer(corpus, sizeof corpus - 1);
    if (prep_chat_create(&chat, tok, chatml, NULL, "<|endoftext|>", "fuzz") != HG_OK) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const hg_train_on on = (hg_train_on)(data[0] % 3);
    const int32_t *ids;
    const uint8_t *flags;
    size_t n;
    if (prep_chat_record(chat, (const char *)data + 1, size - 1, on, &ids, &flags, &n) != HG_OK) return 0;
    const int V = hg_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n; i++) {
        if (flags[i] & ~(HG_TOKEN_TRAIN | HG_TOKEN_DOC)) __builtin_trap();
        if ((i == 0) != !!(flags[i] & HG_TOKEN_DOC)) __builtin_trap();
        if (i == 0 && (flags[i] & HG_TOKEN_TRAIN)) __builtin_trap();
        if (ids[i] < 0 || ids[i] >= V) __builtin_trap();
    }
    return 0;
}
