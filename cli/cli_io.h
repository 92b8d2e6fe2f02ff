/* Small helpers shared by the CLI's data commands: reading an input whole, and
 * printing a library error. */
#ifndef HG_CLI_IO_H
#define HG_CLI_IO_H

#include <stddef.h>
#include <stdint.h>

/* Reads a file, or stdin when path is "-", into a malloc'd buffer; prints the error
 * and returns NULL on failure. */
uint8_t *cli_read_input(const char *cmd, const char *path, size_t *len);
/* Prints "handgrad <cmd>: <last library error>" to stderr and returns 1. */
int cli_fail(const char *cmd);

#endif
