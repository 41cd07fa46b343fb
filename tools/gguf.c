/* recur-gguf — inspect and produce GGUF files.
 *
 *   recur-gguf info FILE
 *   recur-gguf synth --arch A --preset P -o FILE [--type T] [--seed N] [--weights zero] [--allow-large]
 *   recur-gguf render -m FILE --context JSON|@FILE [--template FILE]
 *   recur-gguf tokenize -m FILE [--add-special] [--parse-special] TEXT
 *   recur-gguf detokenize -m FILE [--no-special] IDS
 *
 * main only dispatches: each subcommand lives in its own tools/gguf_<name>.c and is listed in
 * k_cmds below (add `tokenize`, `render`, ... there). */
#include <stdio.h>
#include <string.h>

#include "gguf_tool.h"

typedef struct subcmd {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;
    const char *summary;
} subcmd;

static const subcmd k_cmds[] = {
    {"info", cmd_info, "info FILE",
     "print the header, the per-sequence memory recur allocates, every KV and every tensor of a GGUF file"},
    {"synth", cmd_synth, "synth --arch A --preset P -o FILE [--type T] [--seed N] [--weights zero] [--allow-large]",
     "write a model of a preset shape with random or zero weights (see `recur-gguf synth --help`)"},
    {"render", cmd_render, "render -m FILE --context JSON|@FILE [--template FILE] [--now YYYY-MM-DDTHH:MM:SS]",
     "print the prompt a chat template renders from a context (messages, tools, add_generation_prompt, ...)"},
    {"tokenize", cmd_tokenize, "tokenize -m FILE [--add-special] [--parse-special] TEXT",
     "print the token ids of TEXT as a JSON array"},
    {"detokenize", cmd_detokenize, "detokenize -m FILE [--no-special] [--remove-special] IDS",
     "print the text of token ids (\"1,2,3\" or a JSON array)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: recur-gguf <command> [args]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(f, "  %s\n      %s\n", k_cmds[i].usage, k_cmds[i].summary);
    fprintf(f, "\n`recur-gguf <command> --help` describes a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (!strcmp(c, k_cmds[i].name)) return k_cmds[i].run(argc - 1, argv + 1);
    fprintf(stderr, "recur-gguf: unknown command '%s'\n\n", c);
    usage(stderr);
    return 2;
}
