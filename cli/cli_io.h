/* Small helpers shared by the CLI's commands: reading an input whole, printing a library
 * error, checking an output path before a run. */
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

#endif
