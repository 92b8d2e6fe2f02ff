/* Subcommands of the handgrad CLI. Each takes the arguments after its name
 * (argv[0] is the subcommand) and returns the process exit status. */
#ifndef HG_CLI_COMMANDS_H
#define HG_CLI_COMMANDS_H

typedef int hg_command_fn(int argc, char **argv);

typedef struct hg_command {
    const char *name;
    const char *summary;
    hg_command_fn *run;
} hg_command;

hg_command_fn cmd_bench;     /* cmd_bench.c */
hg_command_fn cmd_tokenizer; /* cmd_tokenizer.c */
hg_command_fn cmd_prepare;   /* cmd_prepare.c */
hg_command_fn cmd_profile;   /* cmd_profile.c */
hg_command_fn cmd_train;     /* cmd_train.c, train_options.c, train_log.c */
hg_command_fn cmd_generate;  /* cmd_generate.c */
hg_command_fn cmd_export;    /* cmd_export.c */
hg_command_fn cmd_ops;       /* cmd_ops.c */

#endif
