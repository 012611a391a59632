// commands.h — the subcommands of the kogpt2 command line. Each takes (argc, argv) with
// argv[0] = the subcommand's name, parses its own flags with getopt_long and returns the
// process exit code (0 ok, 1 failure, 2 usage).
#ifndef CLI_COMMANDS_H
#define CLI_COMMANDS_H

#include <stddef.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} CliCommand;

int cmd_next(int argc, char **argv);       // cmd_next.c
int cmd_tokenize(int argc, char **argv);   // cmd_tokenize.c
int cmd_detokenize(int argc, char **argv); // cmd_tokenize.c
int cmd_convert(int argc, char **argv);    // cmd_convert.c

// Appends the ids in s (decimal, separated by commas and/or whitespace) to *ids, which holds
// *n of *cap and grows with realloc. 0, or -1 on a malformed list or OOM (*ids stays the
// caller's to free). cmd_tokenize.c.
int cli_parse_ids(const char *s, int **ids, size_t *n, size_t *cap);

#endif
