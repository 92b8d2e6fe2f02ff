/* Small helpers shared by the CLI's commands: reading an input whole, printing a library
 * error, checking an output path before a run, creating an output folder. */
#ifndef HG_CLI_IO_H
#define HG_CLI_IO_H

#include <stddef.h>
#include <stdint.h>

/* Reads a file, or stdin when path is "-", into a malloc'd buffer; prints the error
 * and returns NULL on failure. */
uint8_t *cli_read_input(const char *cmd, const char *path, size_t *len);
/* Prints "handgrad <cmd>: <last library error>" to stderr and returns 1. */
int cli_fail(const char *cmd);
/* Checks before a long run that an output file can be created: its directory exists and
 * is writable, and the path is not a directory. Prints "handgrad <cmd>: <flag> <path>: why"
 * and returns 1 when not; returns 0 when it can. */
int cli_check_writable(const char *cmd, const char *flag, const char *path);
/* The folder a path names: path itself when it is a folder, else the folder holding
 * the file ("." for a bare name). */
void cli_folder_of(const char *path, char *out, size_t cap);
/* Creates the folder dir and any missing parents, as mkdir -p does (mode 0777 less the
 * umask); a folder that exists already is fine. Returns 0, or an errno value with the
 * path that could not be created (dir itself or a parent) in failed[cap]. */
int cli_make_dirs(const char *dir, char *failed, size_t cap);
/* cli_make_dirs for an option's folder: on failure prints one line, "handgrad <cmd>:
 * <flag> <dir>: cannot create the folder <path>: why" (or "...: cannot create the folder:
 * <path> is a file"), and returns 1; else 0. */
int cli_mkdir_p(const char *cmd, const char *flag, const char *dir);

#endif
