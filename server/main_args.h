// main_args.h — kogpt2d's command line: one table of flags (main_args.c, read by base/flags.h),
// each also from its KOGPT2_<FLAG> environment variable (a flag given wins), SageMaker's
// `serve` defaults, the API keys. main.c reads the result; nothing here loads or serves.
#ifndef MAIN_ARGS_H
#define MAIN_ARGS_H

#include <stddef.h>

#include "model/dtype.h"
#include "server/http/auth.h"
#include "server/http/log.h"

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
    int no_speculate, quiet;
    LogFormat log_format;
    AuthKeys keys; // --api-key and --api-key-file (or their variables): every key they give
    // --model in order: its name (NULL: none yet; filled in after the parse), directory (or
    // ORG/NAME) and its own options (--model NAME=DIR,dtype=T,ctx-size=N,chat-template=FILE),
    // which win over the flags
    struct {
        const char *name, *dir;
        char *given;   // the flag's value, malloc'd (main_args_free frees it) and cut into the
                       // name, the directory and the options, which point into it; or NULL
        char from[24]; // "--model" or "KOGPT2_MODEL", for the messages about it
        int dtype_set; // dtype was given for this model
        KgDtype dtype; // (dtype_set) else the --dtype flag's
        long ctx_size; // 0: --ctx-size's
        const char *chat_template; // NULL: --chat-template's
    } models[MAIN_MAX_MODELS];
    size_t n_models;
    int models_given; // a --model (or KOGPT2_MODEL) replaced SageMaker's default
} MainArgs;

// Fills a from argv and the environment: the model directories resolved (ORG/NAME in the
// Hugging Face cache) and checked to be there, the models named, the API keys read. Returns -1
// to go on, else the exit code after printing what to print: 0 after --help or --version, 2
// for a usage error, 1 for a model that is not there or out of memory (one line naming the
// flag or variable at fault). In every case free a with main_args_free() afterwards.
int main_args_parse(MainArgs *a, int argc, char **argv);

// Frees what main_args_parse allocated (the models' names, the keys).
void main_args_free(MainArgs *a);

#endif
