/* The option tables of the handgrad commands: each command describes its options once,
 * as an array of cli_opt naming a field of its settings struct, and one parser turns
 * that table into GNU long flags (--name value, --name=value), range checks, --help
 * text, and for `train` the JSON config file and the run.json a checkpoint keeps.
 *
 * Every usage error is one line on stderr naming the option, and exit status 2:
 *   handgrad CMD: unknown option '--x' (see handgrad CMD --help)
 *   handgrad CMD: option '--x' needs a value (see handgrad CMD --help)
 *   handgrad CMD: --x: 'v' is not an integer in [lo, hi]
 *   handgrad CMD: --x: 'v' is not a number in [lo, hi]
 *   handgrad CMD: --x: 'v' is not a, b or c
 *   handgrad CMD: unexpected argument 'v' (options are --name value)
 * -h and --version are handled before a command runs (main.c). */
#ifndef HG_CLI_OPTS_H
#define HG_CLI_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    CLI_SECTION, /* not an option: a heading in --help (name is its title) */
    CLI_STR,     /* const char *; from argv it points into argv, from JSON into the pool */
    CLI_CHOICE,  /* const char *, one of the '|'-separated words of arg ("cosine|linear") */
    CLI_INT,     /* int in [lo, hi] */
    CLI_I64,     /* int64_t in [lo, hi] */
    CLI_F64,     /* double in [lo, hi], or (lo, hi] with CLI_LO_OPEN */
    CLI_BOOL,    /* int; the flag alone sets 1, JSON true/false */
    CLI_SET,     /* int; the flag alone stores (int)lo there (--json/--csv into one field) */
    CLI_INTS,    /* cli_ints: a comma-separated list, each in [lo, hi] */
    CLI_STRS,    /* cli_strs: every use of the flag adds one string */
} cli_type;

enum {
    CLI_SAVED = 1,   /* kept in run.json (cli_to_json) */
    CLI_HIDDEN = 2,  /* an old spelling: accepted, not listed in --help */
    CLI_ARGV = 4,    /* a flag only, not a JSON config key (--config itself) */
    CLI_LO_OPEN = 8, /* CLI_F64: lo itself is refused */
    CLI_TEXT = 16,   /* any text, even one starting with "--" (a prompt, a stop string) */
    CLI_SHOW0 = 32,  /* --help shows a default of 0 too (else 0 reads as "not given") */
};

enum { CLI_LIST_MAX = 16 };
typedef struct cli_ints {
    int v[CLI_LIST_MAX];
    int n; /* 0: not given */
} cli_ints;
typedef struct cli_strs {
    const char *v[CLI_LIST_MAX];
    int n;
} cli_strs;

typedef struct cli_opt {
    const char *name; /* the long flag without "--", and the JSON key */
    cli_type type;
    size_t off;       /* of the field in the command's settings struct */
    const char *arg;  /* the value's name in --help; CLI_CHOICE: the accepted words */
    double lo, hi;    /* numbers: the accepted range; CLI_SET: the value stored */
    unsigned flags;   /* CLI_SAVED, CLI_HIDDEN, ... */
    const char *help; /* without a "default": --help adds the settings' own default */
} cli_opt;

typedef struct cli_cmd {
    const char *name;     /* "bench": messages say "handgrad bench: ..." */
    const char *synopsis; /* --help's first lines ("usage: ..."), printed as they are */
    const char *about;    /* then paragraphs, one per line, wrapped to 80 columns; or NULL */
    const char *epilog;   /* the same after the options, or NULL */
    const cli_opt *opts;
    int n_opts;
    const char *operands; /* the operands it takes ("FILE..."), or NULL: none */
} cli_cmd;

#define CLI_CMD(name, synopsis, about, epilog, table, operands) \
    ((cli_cmd){name, synopsis, about, epilog, table, (int)(sizeof table / sizeof table[0]), operands})

/* Strings a JSON config put into a settings struct, owned here until cli_pool_free. */
typedef struct cli_pool {
    char **s;
    int n, cap;
} cli_pool;
void cli_pool_free(cli_pool *p);

/* What cli_parse returns: 0, or these (a command returns cli_exit(rc)). */
enum { CLI_HELP = -1, CLI_USAGE = 2 };
static inline int cli_exit(int rc) { return rc == CLI_HELP ? 0 : rc; }

/* Parses argv (argv[0] is the command's name) into dst, which holds the defaults: 0 with
 * *operands the index of the first operand (NULL: none allowed, as cmd->operands says);
 * CLI_HELP after printing --help to stdout; CLI_USAGE after printing the error line. */
int cli_parse(const cli_cmd *cmd, void *dst, int argc, char **argv, int *operands);

/* The two halves of cli_parse, for a command that applies other sources between them
 * (train: run.json, then --config, then the flags). cli_scan collects the options in
 * order into *hits (malloc'd, free it) without setting anything; cli_apply sets them. */
typedef struct cli_hit {
    const cli_opt *opt;
    const char *value; /* NULL for a flag without a value */
} cli_hit;
int cli_scan(const cli_cmd *cmd, const void *defaults, int argc, char **argv, cli_hit **hits, int *n_hits,
             int *operands);
int cli_apply(const cli_cmd *cmd, void *dst, const cli_hit *hits, int n_hits);

/* Sets option o of dst from text; `who` names where the text came from ("--lr",
 * "cfg.json: key 'lr'"). Strings are copied into pool when it is given, else kept as
 * pointers. Returns 0, or 1 with the message (without "handgrad CMD: ") in err. */
int cli_set(const cli_opt *o, void *dst, const char *text, const char *who, cli_pool *pool, char *err, size_t cap);

/* Applies a JSON object whose keys are option names (not CLI_ARGV ones) to dst; its
 * strings go into pool. Returns 0, or 1 with a message naming `name` and the key. */
int cli_apply_json(const cli_cmd *cmd, void *dst, cli_pool *pool, const char *name, const char *text, size_t len,
                   char *err, size_t cap);
/* The CLI_SAVED options of src as a malloc'd JSON object; unset strings (NULL) and
 * negative numbers (the "unset" of some fields) are left out. */
char *cli_to_json(const cli_cmd *cmd, const void *src);

/* --help: the synopsis, the about text, the options by section with the defaults dst
 * holds, the epilog. */
void cli_usage(const cli_cmd *cmd, const void *dst, FILE *f);
/* The option named name (without "--"), or NULL. */
const cli_opt *cli_find(const cli_cmd *cmd, const char *name);

#endif
