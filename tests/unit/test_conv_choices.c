/*
 * The tuned convolution choices file (src/backend/conv_choices.c): line
 * round trips, malformed and foreign lines skipped, the file read and
 * appended, the directory chosen from the environment.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/conv_choices.h"
#include "core/mem.h"
#include "ditto/ditto_error.h"
#include "test_util.h"

static const char *SCOPE = "NVIDIA_H200|91400";

static DittoConvChoice sample(bool legacy, int knobs)
{
    DittoConvChoice c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < DITTO_CONV_KEY_LEN; i++)
        c.key[i] = i * 7 - 3;
    c.legacy = legacy;
    c.engine = legacy ? 0 : 62;
    c.nknobs = knobs;
    for (int i = 0; i < knobs; i++) {
        c.knob_type[i] = i + 1;
        c.knob_value[i] = i % 3 ? -i : (int64_t)1 << 40;
    }
    return c;
}

static bool same(const DittoConvChoice *a, const DittoConvChoice *b)
{
    if (memcmp(a->key, b->key, sizeof a->key) || a->legacy != b->legacy)
        return false;
    if (a->legacy)
        return true;
    return a->engine == b->engine && a->nknobs == b->nknobs && !memcmp(a->knob_type, b->knob_type, sizeof(int64_t) * (size_t)a->nknobs) &&
           !memcmp(a->knob_value, b->knob_value, sizeof(int64_t) * (size_t)a->nknobs);
}

/* Format then parse (without the newline): the same choice back. */
static bool round_trip(const DittoConvChoice *c)
{
    char line[2048];
    int k = ditto_conv_choice_format(c, SCOPE, line, sizeof line);
    if (k <= 0 || line[k - 1] != '\n' || (size_t)k != strlen(line))
        return false;
    line[k - 1] = 0;
    DittoConvChoice back;
    return ditto_conv_choice_parse(line, SCOPE, &back) && same(c, &back);
}

static void test_lines(TestCtx *c)
{
    DittoConvChoice a = sample(true, 0), b = sample(false, 0), d = sample(false, 5), m = sample(false, DITTO_CONV_MAX_KNOBS);
    /* a fused epilogue's line: the key's last number the kind, engine 2^30 the legacy fused call (conv.cu) */
    DittoConvChoice f = sample(false, 0);
    f.key[DITTO_CONV_KEY_LEN - 1] = 3 + 8;
    f.engine = (int64_t)1 << 30;
    test_report(c, "choices.round_trip", round_trip(&a) && round_trip(&b) && round_trip(&d) && round_trip(&m) && round_trip(&f),
                "legacy, no knobs, 5 knobs, the most knobs, a fused epilogue's legacy call");

    /* a line that does not fit, and invalid choices, are refused */
    char small[40];
    DittoConvChoice bad = sample(false, 2);
    bad.engine = -1;
    char line[2048];
    DittoConvChoice over = sample(false, 2);
    over.nknobs = DITTO_CONV_MAX_KNOBS + 1;
    test_report(c, "choices.format_refuses", ditto_conv_choice_format(&d, SCOPE, small, sizeof small) < 0 &&
                ditto_conv_choice_format(&bad, SCOPE, line, sizeof line) < 0 && ditto_conv_choice_format(&over, SCOPE, line, sizeof line) < 0,
                "");

    /* malformed lines, lines of another scope */
    char key[512] = "0";
    for (int i = 1; i < DITTO_CONV_KEY_LEN; i++)
        snprintf(key + strlen(key), sizeof key - strlen(key), ",%d", i);
    const char *tails[] = {
        "|legacy",                /* valid: checked below */
        "|62|2:3,4:5",            /* valid */
        "|62|",                   /* valid: no knobs */
        "|legacyx",
        "|62",
        "|62|2:3,",
        "|62|2:3,,4:5",
        "|62|2",
        "|62|2:",
        "|62|:3",
        "|62|-2:3",
        "|-62|2:3",
        "|62|2:3x",
        "|6 2|2:3",
        "|+62|2:3",
        "|62|2:99999999999999999999",
        "|",
        "",
    };
    int parsed = 0, wrong = 0;
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
        char l[1024];
        snprintf(l, sizeof l, "v2|%s|%s%s", SCOPE, key, tails[i]);
        DittoConvChoice out;
        bool ok = ditto_conv_choice_parse(l, SCOPE, &out);
        parsed += ok;
        wrong += ok != (i < 3);
    }
    /* key problems: one number short, one too many, a letter, the wrong version or scope */
    char k24[512], k26[512];
    snprintf(k24, sizeof k24, "%s", key);
    *strrchr(k24, ',') = 0;
    snprintf(k26, sizeof k26, "%s,9", key);
    const char *heads[] = { "v2|NVIDIA_H200|91400", "v2|NVIDIA_H200|91400", "v2|NVIDIA_H200|91400", "v1|NVIDIA_H200|91400",
                            "v2|NVIDIA_H200|91401", "v2|NVIDIA_H100|91400", "v2|NVIDIA_H200|914" };
    const char *keys[] = { k24, k26, "0,1,2,3,4,5,6,7,8,9,10,11,12,a,14,15,16,17,18,19,20,21,22,23,24", key, key, key, key };
    for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
        char l[1024];
        snprintf(l, sizeof l, "%s|%s|legacy", heads[i], keys[i]);
        DittoConvChoice out;
        wrong += ditto_conv_choice_parse(l, SCOPE, &out);
    }
    /* more knobs than a choice holds */
    char many[4096];
    snprintf(many, sizeof many, "v2|%s|%s|62|", SCOPE, key);
    for (int i = 0; i <= DITTO_CONV_MAX_KNOBS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s%d:1", i ? "," : "", i);
    DittoConvChoice out;
    wrong += ditto_conv_choice_parse(many, SCOPE, &out);
    test_report(c, "choices.parse_strict", wrong == 0 && parsed == 3, "%d lines judged wrongly", wrong);

    char scope[DITTO_CONV_SCOPE_MAX];
    ditto_conv_choices_scope("NVIDIA H200|x,y:z", 91400, scope, sizeof scope);
    char empty[DITTO_CONV_SCOPE_MAX];
    ditto_conv_choices_scope("", 7, empty, sizeof empty);
    test_report(c, "choices.scope", !strcmp(scope, "NVIDIA_H200_x_y_z|91400") && !strcmp(empty, "unknown|7"), "%s, %s", scope, empty);
}

static void test_file(TestCtx *c)
{
    char tmpl[] = "/tmp/ditto-choices-XXXXXX";
    char *root = mkdtemp(tmpl);
    if (!root) {
        test_report(c, "choices.file", false, "mkdtemp failed");
        return;
    }
    char dir[600], path[700], dir2[600], path2[700];
    snprintf(dir, sizeof dir, "%s/cache/ditto", root);   /* neither level exists yet */
    snprintf(path, sizeof path, "%s/" DITTO_CONV_CHOICES_FILE, dir);

    /* a missing file: no choices, no error */
    DittoConvChoice *got = NULL;
    int n = -1;
    int rc = ditto_conv_choices_read(path, SCOPE, &got, &n);
    test_report(c, "choices.missing_file", rc == 0 && n == 0 && !got, "rc %d, %d choices", rc, n);

    DittoConvChoice a = sample(true, 0), b = sample(false, 3);
    b.key[0] = 99;
    rc = ditto_conv_choices_append(dir, path, SCOPE, &a);
    rc |= ditto_conv_choices_append(dir, path, "OTHER|1", &b);   /* another device's line */
    rc |= ditto_conv_choices_append(dir, path, SCOPE, &b);
    FILE *f = fopen(path, "ab");                                   /* garbage and a truncated last line */
    if (f) {
        fputs("garbage\n\n\nv2|NVIDIA_H200|91400|1,2\n", f);
        fputs("v2|NVIDIA_H200|91400|0,1,2", f);
        fclose(f);
    }
    rc |= ditto_conv_choices_read(path, SCOPE, &got, &n);
    bool ok = rc == 0 && n == 2 && got && same(&got[0], &a) && same(&got[1], &b);
    test_report(c, "choices.append_read", ok, "rc %d, %d choices", rc, n);
    ditto_free(got);

    /* an invalid choice is not written */
    DittoConvChoice bad = sample(false, 1);
    bad.engine = -5;
    test_report(c, "choices.append_invalid", ditto_conv_choices_append(dir, path, SCOPE, &bad) == DITTO_ERR_INVAL, "");

    /* a directory that cannot be made (its parent is a file): an I/O error, nothing else */
    snprintf(dir2, sizeof dir2, "%s/cache/ditto/" DITTO_CONV_CHOICES_FILE "/sub", root);
    snprintf(path2, sizeof path2, "%s/" DITTO_CONV_CHOICES_FILE, dir2);
    test_report(c, "choices.unwritable", ditto_conv_choices_append(dir2, path2, SCOPE, &a) == DITTO_ERR_IO, "");

    /* a path that is a directory cannot be read */
    got = NULL;
    rc = ditto_conv_choices_read(dir, SCOPE, &got, &n);
    test_report(c, "choices.read_dir", rc == DITTO_ERR_IO && !got && n == 0, "rc %d", rc);

    unlink(path);
    rmdir(dir);
    snprintf(dir2, sizeof dir2, "%s/cache", root);
    rmdir(dir2);
    rmdir(root);
}

static void test_paths(TestCtx *c)
{
    const char *names[] = { "DITTO_CACHE_DIR", "XDG_CACHE_HOME", "HOME" };
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(names[i]);
    }
    char dir[256], path[300];
    bool ok = ditto_conv_choices_path(dir, sizeof dir, path, sizeof path) < 0;
    setenv("HOME", "/home/u", 1);
    ok = ok && !ditto_conv_choices_path(dir, sizeof dir, path, sizeof path) && !strcmp(dir, "/home/u/.cache/ditto") &&
         !strcmp(path, "/home/u/.cache/ditto/" DITTO_CONV_CHOICES_FILE);
    setenv("XDG_CACHE_HOME", "/x", 1);
    ok = ok && !ditto_conv_choices_path(dir, sizeof dir, path, sizeof path) && !strcmp(dir, "/x/ditto");
    setenv("DITTO_CACHE_DIR", "/d", 1);
    ok = ok && !ditto_conv_choices_path(dir, sizeof dir, path, sizeof path) && !strcmp(dir, "/d") && !strcmp(path, "/d/" DITTO_CONV_CHOICES_FILE);
    char tiny[8];
    ok = ok && ditto_conv_choices_path(dir, sizeof dir, tiny, sizeof tiny) < 0;
    for (int i = 0; i < 3; i++) {
        if (saved[i])
            setenv(names[i], saved[i], 1);
        else
            unsetenv(names[i]);
        free(saved[i]);
    }
    test_report(c, "choices.path", ok, "");
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    test_lines(&c);
    test_file(&c);
    test_paths(&c);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
