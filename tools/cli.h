/* Subcommands of the ditto CLI. Each returns the process exit status. */
#ifndef DITTO_TOOLS_CLI_H
#define DITTO_TOOLS_CLI_H

typedef struct DittoCommand {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv);   /* argv[0] is the command name */
} DittoCommand;

int ditto_cmd_info(int argc, char **argv);
int ditto_cmd_verify(int argc, char **argv);
int ditto_cmd_bench(int argc, char **argv);
/* ditto bench --e2e AVATAR ...: the whole pipeline through the session API (cmd_bench_e2e.c). */
int ditto_bench_e2e(int argc, char **argv);
/* ditto bench --lmdm ...: the motion sampler alone, op by op and as CUDA graphs (cmd_bench_lmdm.c). */
int ditto_bench_lmdm(int argc, char **argv);
int ditto_cmd_bake(int argc, char **argv);
int ditto_cmd_render(int argc, char **argv);

/* "auto", "fp32" or "fp16" -> DITTO_PRECISION_*; -1 for anything else (--precision, --motion-precision). */
int ditto_cli_precision(const char *s);

#endif
