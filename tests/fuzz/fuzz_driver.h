/*
 * Corpus replay and deterministic mutation driver shared by the reader fuzz
 * targets (fuzz_pth, fuzz_onnx) when they are not built for libFuzzer.
 *
 * fuzz_driver_main replays the files and folders given on the command line
 * ([-n MUTATIONS_PER_FILE] [-s SEED] FILE_OR_DIR...; folders are read in
 * sorted order, their files ending in ext) and, for each file,
 * truncations (every length near both ends, evenly spread ones) and
 * mutations in place on an exact-size copy at positions biased towards
 * both ends. What a mutation writes is the target's `mutate`.
 */
#ifndef DITTO_FUZZ_DRIVER_H
#define DITTO_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef struct FuzzTarget {
    const char *name;   /* "fuzz_pth": prefix of every output line */
    const char *ext;    /* file name ending taken from folders: ".pth" */
    uint64_t seed;      /* default seed (-s) */
    /* run one input; 1 when it loaded, 0 when it was rejected */
    int (*one)(const uint8_t *data, size_t size);
    /* mutation k (of one file) at byte *b, with random bits r */
    void (*mutate)(uint8_t *b, long k, uint64_t r);
} FuzzTarget;

int fuzz_driver_main(int argc, char **argv, const FuzzTarget *t);

#endif
