// main_args.h — kogpt2d's command line: every flag, each also from its KOGPT2_<FLAG>
// environment variable (flags win), SageMaker's `serve` defaults, the API keys. main.c reads
// the result; nothing here loads or serves.
#ifndef MAIN_ARGS_H
#define MAIN_ARGS_H

#include <stddef.h>

#include "model/dtype.h"
#include "server/http/auth.h"
#include "server/http/log.h"

#define MAIN_MAX_KEY_ARGS    64              // --api-key and --api-key-file given, together
#define MAIN_MAX_MODELS      8               // --model given, together
#define MAIN_SAGEMAKER_MODEL "/opt/ml/model" // where SageMaker unpacks a model's files

typedef struct {
    const char *alias, *host, *cors_origin, *web_dir, *device, *chat_template;
    long port, threads, http_threads, ctx_size, max_batch, max_queue, cache_mb, timeout_s;
    long batch_tokens, kv_cache_mb; // --max-batch-tokens, --kv-cache-mb (0: auto)
    long max_body, max_connections, max_connections_per_ip, request_timeout_s, max_tokenize;
    long work_threads, max_work_queue;
    KgDtype dtype;     // --dtype: KG_DTYPE_AUTO keeps what the file stores
    KgDtype precision; // be->mixed: KG_F32 or KG_BF16
    KgDtype kv_dtype;  // be->kv_dtype: KG_DTYPE_AUTO keeps the backend's default
    int speculate, quiet;
    LogFormat log_format;
    // --api-key and --api-key-file (or their variables) in order, then the keys they give
    struct {
        const char *value;
        int file, from_env;
    } key_args[MAIN_MAX_KEY_ARGS];
    size_t n_key_args;
    AuthKeys keys;
    // --model in order: its name (NULL: not given), directory (or ORG/NAME) and its own options
    // (--model NAME=DIR,dtype=T,ctx-size=N,chat-template=FILE), which win over the flags
    struct {
        const char *name, *dir;
        int dtype_set;             // dtype was given for this model
        KgDtype dtype;             // (dtype_set) else the --dtype flag's
        long ctx_size;             // 0: --ctx-size's
        const char *chat_template; // NULL: --chat-template's
    } models[MAIN_MAX_MODELS];
    size_t n_models;
    int models_from_flags; // a --model flag gave them (the first flag replaces a variable's)
} MainArgs;

// Fills a from argv and the environment. A usage error prints its line and exits 2 (this
// is the program's own front door, as train_args.c is the trainer's); --help and --version
// print and exit 0.
void main_args_parse(MainArgs *a, int argc, char **argv);

#endif
