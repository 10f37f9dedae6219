/*
 * ditto — command-line front end. Thin: parses arguments and calls the
 * library. Each subcommand lives in tools/cmd_<name>.c.
 */
#include <stdio.h>
#include <string.h>

#include "ditto/ditto.h"
#include "tools/cli.h"

int ditto_cli_precision(const char *s)
{
    return !strcmp(s, "auto") ? DITTO_PRECISION_AUTO : !strcmp(s, "fp32") ? DITTO_PRECISION_FP32 : !strcmp(s, "fp16") ? DITTO_PRECISION_FP16 : -1;
}

static const DittoCommand commands[] = {
    { "render", "speech + portrait (or video loop, or .avatar) -> lip-synced talking-head MP4", ditto_cmd_render },
    { "info", "list the tensors of a .pth checkpoint", ditto_cmd_info },
    { "verify", "check this build against reference outputs (fixture manifest)", ditto_cmd_verify },
    { "bench", "time the render networks at the official size (synthetic weights)", ditto_cmd_bench },
    { "bake", "register an avatar image or video into a .avatar file", ditto_cmd_bake },
};

static void usage(FILE *f)
{
    fprintf(f, "ditto %s — lip-synced talking-head video from speech and a portrait\n\n"
               "usage: ditto COMMAND [OPTIONS]\n\ncommands:\n", ditto_version());
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nRun 'ditto COMMAND --help' for the options of a command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ditto %s\n", ditto_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ditto: unknown command '%s' (run 'ditto --help')\n", argv[1]);
    return 2;
}
