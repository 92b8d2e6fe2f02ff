/* The handgrad command: dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static const hg_command commands[] = {
    {"bench", "time forward, backward and a training step against the sgemm ceiling", cmd_bench},
    {"tokenizer", "encode, decode or train a byte-level BPE tokenizer", cmd_tokenizer},
    {"prepare", "tokenize text files into train and val token shards", cmd_prepare},
    {"profile", "time every op of a training step per layer; Chrome trace; memory report", cmd_profile},
    {"train", "train a model with progress, logs, a loss plot, checkpoints and resume", cmd_train},
    {"generate", "continue a prompt with a model, streaming the text (KV cache)", cmd_generate},
    {"export", "write a model as a Hugging Face GPT-2 folder", cmd_export},
    {NULL, NULL, NULL},
};

static void usage(FILE *f) {
    fprintf(f, "usage: handgrad <command> [options]\n\ncommands:\n");
    for (const hg_command *c = commands; c->name; c++) fprintf(f, "  %-12s %s\n", c->name, c->summary);
    fprintf(f, "\nRun 'handgrad <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (const hg_command *c = commands; c->name; c++)
        if (!strcmp(argv[1], c->name)) return c->run(argc - 1, argv + 1);
    fprintf(stderr, "handgrad: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
