// kogpt2 — the one-shot command line: next-token, generate, tokenize, detokenize, convert,
// score.
// Each subcommand lives in its own cmd_*.c file and is listed once in COMMANDS below.
#include "commands.h"

#include <stdio.h>
#include <string.h>

static const CliCommand COMMANDS[] = {
    {"next", cmd_next, "print the top-k next tokens of a prompt"},
    {"generate", cmd_generate, "continue a prompt with sampled text, streamed as it comes"},
    {"tokenize", cmd_tokenize, "text -> token ids and pieces"},
    {"detokenize", cmd_detokenize, "token ids -> text"},
    {"convert", cmd_convert, "write any loadable model as a model.safetensors directory"},
    {"score", cmd_score, "bits per byte of every line of a text or JSONL file, as JSON lines"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kogpt2 COMMAND [OPTIONS]   (kogpt2 COMMAND --help for its options)\n"
               "       kogpt2 --version\n\n");
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "kogpt2: no command given\n");
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        char version[KG_ERRLEN];
        puts(cli_version(version));
        return 0;
    }
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "kogpt2: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
