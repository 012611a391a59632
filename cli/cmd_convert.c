// kogpt2 convert — any model kogpt2 loads (model.safetensors, shards, pytorch_model.bin, a
// Hugging Face cache entry by repo id) written once as a clean model.safetensors directory,
// so that every later load maps it in place; --dtype q8_0/q4_0 stores the layers quantized.
// Progress goes to stderr: a redrawn line with an ETA on a terminal, a line per 10 % elsewhere.
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kg.h"
#include "commands.h"
#include "model/gpt2.h"
#include "model/hfcache.h"

static void convert_usage(FILE *f) {
    fprintf(f, "usage: kogpt2 convert --model SRC --out DIR [--dtype f32|f16|bf16|q8_0|q4_0]\n"
               "                      [--force]\n"
               "  --model SRC   a model directory (model.safetensors, *.index.json shards or\n"
               "                pytorch_model.bin) or ORG/NAME[@REV] in the Hugging Face cache\n"
               "  --out DIR     where model.safetensors, config.json and the tokenizer files go\n"
               "                (created if missing; never SRC itself)\n"
               "  --force       replace the model DIR already holds (else refused)\n"
               "  --dtype T     convert every tensor to T (default: keep each tensor's dtype);\n"
               "                q8_0/q4_0 store the layer matrices and the LM head in blocks, as\n"
               "                --dtype q8_0/q4_0 quantizes at load, the rest as it is\n"
               "  --version     print the version and exit\n"
               "Progress goes to stderr in bytes of weights converted and written: one line\n"
               "redrawn with the rate and an ETA on a terminal, else a line per 10 %%.\n");
}

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
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"out", required_argument, 0, 'o'},
                                         {"dtype", required_argument, 0, 'd'},
                                         {"force", no_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {"version", no_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *out = NULL;
    KgDtype dtype = KG_DTYPE_AUTO;
    int force = 0, c;
    char err[KG_ERRLEN];
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:o:d:fh", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            model = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'd':
            if (kg_dtype_parse(optarg, &dtype, err)) {
                fprintf(stderr, "kogpt2 convert: --dtype: %s\n", err);
                return 2;
            }
            break;
        case 'f':
            force = 1;
            break;
        case 'h':
            convert_usage(stdout);
            return 0;
        case 'V':
            puts(cli_version(err));
            return 0;
        default:
            fprintf(stderr, "kogpt2 convert: %s\n", cli_opt_error(c, argv, err));
            convert_usage(stderr);
            return 2;
        }
    }
    const char *wrong = optind != argc ? "unexpected argument"
                        : !model       ? "no --model SRC given"
                        : !out         ? "no --out DIR given"
                                       : NULL;
    if (wrong) {
        fprintf(stderr, "kogpt2 convert: %s%s%s%s\n", wrong, optind != argc ? " '" : "",
                optind != argc ? argv[optind] : "", optind != argc ? "'" : "");
        convert_usage(stderr);
        return 2;
    }
    char dir[PATH_MAX], what[KG_ERRLEN];
    if (hfcache_resolve(model, dir, sizeof dir, err)) {
        fprintf(stderr, "kogpt2 convert: %s\n", err);
        return 1;
    }
    // (--out SRC itself: gpt2_convert refuses it, --force or not, with that reason)
    const char *held = force || same_dir(dir, out) ? NULL : model_file_in(out);
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
