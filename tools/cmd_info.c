/* ditto info FILE...: list the tensors of checkpoints (key, dtype, shape, bytes) and totals. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"
#include "tools/cli.h"
#include "weights/catalog.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ditto info FILE.pth [FILE.pth ...]\n\n"
               "Lists every tensor of a PyTorch checkpoint (as torch.save writes it, e.g. the\n"
               "official ditto_pytorch/models/*.pth): key, dtype, shape and bytes, then the\n"
               "totals. Nested dicts are flattened with '.' (\"model_state_dict.final_layer.weight\").\n"
               "Nothing is executed and no tensor data is read. Exit status: 0 when every file\n"
               "was read, 1 otherwise (with a one-line error per bad file).\n");
}

static int info_file(const char *path, const DittoLogger *log)
{
    DittoCatalog *c = NULL;
    if (ditto_catalog_open_pth(&c, path, log) < 0)
        return 1;
    int wk = 3, wd = 5, ws = 5;
    char shape[DITTO_SHAPE_STR_MAX];
    for (size_t i = 0; i < c->n; i++) {
        const DittoCatalogEntry *e = &c->entries[i];
        int l = (int)strlen(e->name), d = (int)strlen(ditto_dtype_name(e->dtype)),
            s = (int)strlen(ditto_shape_str(e->shape, e->ndim, shape, sizeof shape));
        wk = l > wk ? l : wk;
        wd = d > wd ? d : wd;
        ws = s > ws ? s : ws;
    }
    printf("%s: %zu tensors\n", path, c->n);
    printf("  %-*s  %-*s  %-*s  %14s\n", wk, "key", wd, "dtype", ws, "shape", "bytes");
    uint64_t elems = 0, bytes = 0;
    for (size_t i = 0; i < c->n; i++) {
        const DittoCatalogEntry *e = &c->entries[i];
        uint64_t nb = ditto_catalog_entry_nbytes(e);
        printf("  %-*s  %-*s  %-*s  %14" PRIu64 "\n", wk, e->name, wd, ditto_dtype_name(e->dtype), ws,
               ditto_shape_str(e->shape, e->ndim, shape, sizeof shape), nb);
        elems += (uint64_t)ditto_catalog_entry_numel(e);
        bytes += nb;
    }
    printf("total: %zu tensors, %" PRIu64 " elements, %" PRIu64 " bytes (%.2f MiB); file %zu bytes\n\n", c->n, elems, bytes,
           (double)bytes / (1024.0 * 1024.0), c->map.size);
    ditto_catalog_close(&c);
    return 0;
}

int ditto_cmd_info(int argc, char **argv)
{
    int nfiles = 0, files_only = 0;
    for (int i = 1; i < argc; i++) {
        if (files_only || argv[i][0] != '-' || !argv[i][1]) {
            nfiles++;
        } else if (!strcmp(argv[i], "--")) {
            files_only = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ditto info: unknown option '%s' (run 'ditto info --help')\n", argv[i]);
            return 2;
        }
    }
    if (!nfiles) {
        usage(stderr);
        return 2;
    }
    DittoLogger log = ditto_logger_stderr(DITTO_LOG_WARN);
    int bad = 0;
    files_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!files_only && !strcmp(argv[i], "--")) {
            files_only = 1;
            continue;
        }
        fflush(stdout);   /* keep listings and errors in order on a shared terminal */
        bad |= info_file(argv[i], &log);
    }
    return bad ? 1 : 0;
}
