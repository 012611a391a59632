// commands.h — the subcommands of the kogpt2 command line. Each takes (argc, argv) with
// argv[0] = the subcommand's name, parses its own flags with getopt_long and returns the
// process exit code (0 ok, 1 failure, 2 usage).
#ifndef CLI_COMMANDS_H
#define CLI_COMMANDS_H

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} CliCommand;

int cmd_next(int argc, char **argv);       // cmd_next.c
int cmd_tokenize(int argc, char **argv);   // cmd_tokenize.c
int cmd_detokenize(int argc, char **argv); // cmd_tokenize.c

#endif
