#include <stdio.h>

#include "tools/cli.h"

int ditto_cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "ditto info: not available yet\n");
    return 1;
}
