/* A program compiled for an ISA this CPU may lack (tests/CMakeLists.txt), linked with the
 * command's CPU guard (cli/isa_guard.c): run on such a CPU it must stop before main with
 * the guard's one line, never SIGILL. */
#include <stdio.h>

int main(void) {
    puts("main ran");
    return 0;
}
