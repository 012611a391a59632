// kogpt2 convert — any model kogpt2 loads (model.safetensors, shards, pytorch_model.bin, a
// Hugging Face cache entry by repo id) written once as a clean model.safetensors directory,
// so that every later load maps it in place; --dtype q8_0/q4_0 stores the layers quantized.
// Progress goes to stderr: a redrawn line with an ETA on a terminal, a line per 10 % elsewhere.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/flags.h"
#include "base/kg.h"
#include "commands.h"
#include "model/gpt2.h"
#include "model/hfcache.h"

typedef struct {
    const char *model, *out;
    KgDtype dtype;
    int force;
} ConvertArgs;

static const KgFlag CONVERT_ROWS[] = {
    {.name = "model",
     .short_name = 'm',
     .kind = KG_FLAG_STR,
     .metavar = "SRC",
     KG_FLAG_AT(ConvertArgs, model),
     .help = "a model directory (model.safetensors, *.index.json shards or pytorch_model.bin) or "
             "ORG/NAME[@REV] in the Hugging Face cache"},
    {.name = "out",
     .short_name = 'o',
     .kind = KG_FLAG_STR,
     .metavar = "DIR",
     KG_FLAG_AT(ConvertArgs, out),
     .help = "where model.safetensors, config.json and the tokenizer files go (created if "
             "missing; never SRC itself)"},
    {.name = "force",
     .short_name = 'f',
     .kind = KG_FLAG_SWITCH,
     KG_FLAG_AT(ConvertArgs, force),
     .help = "replace the model DIR already holds (else refused)"},
    {.name = "dtype",
     .short_name = 'd',
     .kind = KG_FLAG_FUNC,
     .metavar = "T",
     KG_FLAG_AT(ConvertArgs, dtype),
     .set = kg_dtype_flag,
     .def = "auto",
     .help = "convert every tensor to f32, f16, bf16, q8_0 or q4_0 (auto: keep each tensor's "
             "dtype); q8_0/q4_0 store the layer matrices and the LM head in blocks, as --dtype "
             "q8_0/q4_0 quantizes at load, the rest as it is"},
    {.name = "help", .short_name = 'h', .kind = KG_FLAG_HELP, .help = "print this help and exit"},
    {.name = "version", .kind = KG_FLAG_VERSION, .help = "print the version and exit"},
};

static const KgFlagTable CONVERT_FLAGS = {
    .program = "kogpt2 convert",
    .usage = "--model SRC --out DIR [--dtype f32|f16|bf16|q8_0|q4_0] [--force]",
    .flags = CONVERT_ROWS,
    .n_flags = sizeof CONVERT_ROWS / sizeof CONVERT_ROWS[0],
    .notes = "Progress goes to stderr in bytes of weights converted and written: one line\n"
             "redrawn with the rate and an ETA on a terminal, else a line per 10 %.\n"};

static int same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// The first file of a model that dir holds (config.json or weights), or NULL.
static const char *model_file_in(const char *dir) {
    static const char *const FILES[] = {"config.json", "model.safetensors",
                                        "model.safetensors.index.json", "pytorch_model.bin",
                                        "pytorch_model.bin.index.json"};
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++)
        if (!kg_path_join(path, sizeof path, dir, FILES[i]) && !access(path, F_OK)) return FILES[i];
    return NULL;
}

int cmd_convert(int argc, char **argv) {
    ConvertArgs a = {0};
    char err[KG_ERRLEN];
    int first, rc = cli_flags_parse(&CONVERT_FLAGS, &a, argc, argv, &first);
    if (rc >= 0) return rc;
    const char *model = a.model, *out = a.out;
    KgDtype dtype = a.dtype;
    const char *wrong = first != argc ? "unexpected argument"
                        : !model      ? "no --model SRC given"
                        : !out        ? "no --out DIR given"
                                      : NULL;
    if (wrong) {
        fprintf(stderr, "kogpt2 convert: %s%s%s%s\n", wrong, first != argc ? " '" : "",
                first != argc ? argv[first] : "", first != argc ? "'" : "");
        return 2;
    }
    char dir[PATH_MAX], what[KG_ERRLEN];
    if (hfcache_resolve(model, dir, sizeof dir, err)) {
        fprintf(stderr, "kogpt2 convert: %s\n", err);
        return 1;
    }
    // (--out SRC itself: gpt2_convert refuses it, --force or not, with that reason)
    const char *held = a.force || same_dir(dir, out) ? NULL : model_file_in(out);
    if (held) {
        fprintf(stderr,
                "kogpt2 convert: %s holds a model already (%s): --force replaces it, or choose "
                "another --out\n",
                out, held);
        return 1;
    }
    if (gpt2_convert(dir, out, dtype, stderr, what, err)) {
        fprintf(stderr, "kogpt2 convert: %s\n", err);
        return 1;
    }
    printf("kogpt2 convert: read %s (%s); wrote %s/model.safetensors%s%s\n", dir, what, out,
           dtype == KG_DTYPE_AUTO ? "" : " as ",
           dtype == KG_DTYPE_AUTO ? "" : kg_dtype_name(dtype));
    return 0;
}
