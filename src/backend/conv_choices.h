/*
 * The file of tuned convolution choices (the CUDA backend's conv.cu tunes
 * cuDNN kernels per convolution geometry once and keeps the result here, so
 * later processes run the same kernels and bits). Plain C: the parser and
 * the file handling are tested without a GPU.
 *
 * DITTO_CACHE_DIR, else $XDG_CACHE_HOME/ditto, else $HOME/.cache/ditto;
 * file conv-engines.txt, one line per geometry, appended:
 *   v2|<scope>|<the 25 key numbers, comma-separated>|legacy
 *   v2|<scope>|<key>|<engine index>|<knob type>:<value>,...
 * where scope is "<device>|<cuDNN version>". Lines of another scope or
 * version and malformed ones are skipped when reading. The version moves
 * when the rules of the choice change, so an older file is tuned again: v2,
 * fused choices made at one item are also checked per item at eight (v1's
 * could be ones that never batch). A key whose last number is not 0
 * names a convolution with its epilogue (bias, relu, residual) fused: there
 * "legacy" means the epilogue keeps its own pass, engine 1073741824 (2^30)
 * cuDNN's legacy fused call, any other engine a fused graph.
 */
#ifndef DITTO_BACKEND_CONV_CHOICES_H
#define DITTO_BACKEND_CONV_CHOICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DITTO_CONV_KEY_LEN 25
#define DITTO_CONV_MAX_KNOBS 24
#define DITTO_CONV_CHOICES_FILE "conv-engines.txt"
#define DITTO_CONV_CHOICES_VERSION "v2"
#define DITTO_CONV_CHOICES_MAX ((size_t)1 << 20)   /* bytes read at most */
#define DITTO_CONV_SCOPE_MAX 300

typedef struct DittoConvChoice {
    int64_t key[DITTO_CONV_KEY_LEN];   /* the geometry (conv.cu's make_key) */
    bool legacy;                       /* the legacy cuDNN algorithm; else engine and knobs */
    int64_t engine;                    /* cuDNN engine global index */
    int nknobs;
    int64_t knob_type[DITTO_CONV_MAX_KNOBS];
    int64_t knob_value[DITTO_CONV_MAX_KNOBS];
} DittoConvChoice;

/* The directory and the file's path; -1 when no variable names a directory or a path does not fit. */
int ditto_conv_choices_path(char *dir, size_t ndir, char *path, size_t npath);

/*
 * scope = "<device>|<version>" with the device name's '|', ',' and blanks
 * replaced by '_' (so a scope never splits a line's fields).
 */
void ditto_conv_choices_scope(const char *device, unsigned long version, char *scope, size_t n);

/* One line (no newline; modified in place) into *c; false when malformed or of another scope. */
bool ditto_conv_choice_parse(char *line, const char *scope, DittoConvChoice *c);

/* The line of c with its newline in out; its length, or -1 when c is invalid or out too small. */
int ditto_conv_choice_format(const DittoConvChoice *c, const char *scope, char *out, size_t n);

/*
 * Every valid line of scope in the file at path (its first
 * DITTO_CONV_CHOICES_MAX bytes): *out (ditto_free) holds *n choices, in file
 * order, duplicates included. A missing file gives none and 0; an
 * unreadable one DITTO_ERR_IO; no memory DITTO_ERR_NOMEM.
 */
int ditto_conv_choices_read(const char *path, const char *scope, DittoConvChoice **out, int *n);

/*
 * Append c's line to path with one write (concurrent appends do not
 * interleave), creating dir and its parent first. DITTO_ERR_IO when the
 * file cannot be written, DITTO_ERR_INVAL when c is invalid.
 */
int ditto_conv_choices_append(const char *dir, const char *path, const char *scope, const DittoConvChoice *c);

#endif
