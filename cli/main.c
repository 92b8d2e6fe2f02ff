/* The handgrad command: loads op plugins (--ops), then dispatches to subcommands. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/tile.h"
#include "commands.h"
#include "handgrad_ext.h"

static const hg_command commands[] = {
    {"bench", "time forward, backward and a training step against the sgemm ceiling", cmd_bench},
    {"tokenizer", "encode, decode or train a byte-level BPE tokenizer", cmd_tokenizer},
    {"prepare", "tokenize text files into train and val token shards", cmd_prepare},
    {"profile", "time every op of a training step per layer; Chrome trace; memory report", cmd_profile},
    {"train", "train a model with progress, logs, a loss plot, checkpoints and resume", cmd_train},
    {"generate", "continue a prompt with a model, streaming the text (KV cache)", cmd_generate},
    {"export", "write a model as a Hugging Face folder", cmd_export},
    {"ops", "list the site ops --ops plugins registered; gradient-check them", cmd_ops},
    {NULL, NULL, NULL},
};

/* handgrad --version: the command's version, the library's, and what this build has. */
static int version(void) {
    printf("handgrad %s (library %s)\n", HG_VERSION_STRING, hg_version());
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: handgrad [--ops PLUGIN.so]... <command> [options]\n       handgrad --version\n\ncommands:\n");
    for (const hg_command *c = commands; c->name; c++) fprintf(f, "  %-12s %s\n", c->name, c->summary);
    fprintf(f, "\n--ops PLUGIN.so loads a shared module whose handgrad_ops_init() registers ops of its\n"
               "own (handgrad_ext.h, hg_register_op); a config then places them with the fields\n"
               "op_attn_proj, op_mlp_act and op_final_norm (--arch). Example: examples/layerscale_ops.c.\n"
               "\nRun 'handgrad <command> --help' (or -h) for a command's options; every command also\n"
               "takes --version.\n"
               "\nExit status: 0 success; 1 a failure while running (a file, the data, the model);\n"
               "2 a usage error (an unknown option, a missing or out-of-range value); 128 + the\n"
               "signal after one stopped the command (130 after Ctrl-C: train saves a checkpoint\n"
               "first).\n");
}

/* Loads plugin `path` and runs its handgrad_ops_init; 0 on success, else a message. The
 * module stays loaded for the life of the process. */
static int load_ops(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "handgrad: --ops %s: %s\n", path, dlerror());
        return 1;
    }
    hg_status (*init)(void);
    *(void **)&init = dlsym(h, "handgrad_ops_init");
    if (!init) {
        fprintf(stderr, "handgrad: --ops %s: the module has no handgrad_ops_init function\n", path);
        return 1;
    }
    hg_status st = init();
    if (st != HG_OK) {
        fprintf(stderr, "handgrad: --ops %s: handgrad_ops_init failed: %s\n", path, hg_last_error());
        return 1;
    }
    return 0;
}

/* What every command takes besides its own options: -h, which becomes --help, and
 * --version, which is answered here (returns 1). Looks before a "--" only. */
static int common_options(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--version")) return version(), 1;
        if (!strcmp(argv[i], "-h")) argv[i] = "--help";
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a result row reaches a pipe or file when it is printed */
    while (argc >= 3 && !strcmp(argv[1], "--ops")) {
        if (load_ops(argv[2])) return 2;
        argc -= 2, argv += 2;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--version")) return version();
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    const char *tiles = tile_env_refused();
    if (tiles) {
        fprintf(stderr, "handgrad: HANDGRAD_TILES=%s: not a tile kernel this build has and this CPU runs (", tiles);
        const char *sep = "";
        for (const tile_kernel *const *k = tile_kernels(); *k; k++)
            if ((*k)->supported()) fprintf(stderr, "%s%s", sep, (*k)->name), sep = ", ";
        fprintf(stderr, ")\n");
        return 2;
    }
    for (const hg_command *c = commands; c->name; c++)
        if (!strcmp(argv[1], c->name)) return common_options(argc - 1, argv + 1) ? 0 : c->run(argc - 1, argv + 1);
    fprintf(stderr, "handgrad: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
