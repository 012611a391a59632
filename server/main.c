// kogpt2d — the KoGPT-2 HTTP daemon: loads a model and its tokenizer, starts the engine
// (sched.h) and the HTTP server (http.h), and drains cleanly on SIGTERM/SIGINT.
//
//   kogpt2d --model [NAME=]DIR [--model NAME=DIR ...] [--host 127.0.0.1] [--port 8080] ...
//
// Start-up order: HTTP first (so /healthz answers and /readyz says 503 while loading),
// then for each model its tokenizer, weights, engine and one warm-up step; once every model
// is warm, /readyz turns 200. The flags and their environment variables: main_args.c.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "base/kg.h"
#include "chat_template/chat_template.h"
#include "main_args.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "server/engine/sched.h"
#include "server/engine/score_memo.h"
#include "server/http/auth.h"
#include "server/http/http.h"
#include "server/http/log.h"
#include "server/http/metrics.h"
#include "tokenizer/tokenizer.h"

#ifndef KG_WEB_DIR
#define KG_WEB_DIR ""
#endif

// What main owns of one served model; app.models[i] is what the endpoints see of it.
typedef struct {
    Tokenizer *tok;
    KgBackend *be;
    Gpt2 gpt2;
    int gpt2_open;
    Sched *sched;
    ChatTemplate *chat;
} MainModel;

// --web-dir, else the project's web/ (kg_find_data_dir); NULL when there is none (then
// only the API is served).
static const char *main_web_dir(const char *flag, char *buf, size_t cap) {
    return flag ? flag : kg_find_data_dir("web", buf, cap);
}

// The backend for --device. kg_backend_new writes its device line into a FILE: here a memory
// one, whose lines then go through the logger. NULL with err.
static KgBackend *main_backend(const MainArgs *a, char *err) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = a->quiet ? NULL : open_memstream(&text, &len);
    KgBackend *be = kg_backend_new(a->device, (int)a->threads, f, err);
    if (f) fclose(f);
    log_lines(LOG_INFO, text);
    free(text);
    return be;
}

static void main_warm_notify(void *ctx) { (void)ctx; }

// Bytes this process may use: the machine's memory, or its cgroup's limit when that is lower
// (a container's). 0 when neither is known.
static size_t main_memory_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    size_t bytes = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r"); // cgroup v2; "max" when unlimited
    unsigned long long limit;
    if (f && fscanf(f, "%llu", &limit) == 1 && limit && (!bytes || limit < bytes))
        bytes = (size_t)limit;
    if (f) fclose(f);
    return bytes;
}

// The engine's KV pool in blocks: --kv-cache-mb, or by default what --max-batch contexts of
// n_ctx positions and the prefix cache need, at most a quarter of the memory (pages are
// resident only once written: the pool's size is a ceiling, not a cost). At least one
// context and a block to copy on write (kv_pool_new refuses fewer, naming both).
static size_t main_kv_blocks(const MainArgs *a, size_t block_bytes, size_t n_ctx) {
    size_t one = kv_blocks_for(n_ctx) + 1;
    if (a->kv_cache_mb > 0) return ((size_t)a->kv_cache_mb << 20) / block_bytes; // checked later
    size_t want =
        (size_t)a->max_batch * kv_blocks_for(n_ctx) + ((size_t)a->cache_mb << 20) / block_bytes;
    size_t quarter = main_memory_bytes() / 4 / block_bytes;
    if (quarter && want > quarter) want = quarter;
    return want > one ? want : one;
}

// One next-token step through the engine, so the first user does not pay for cold caches.
static int main_warm_up(Sched *s, int token, char *err) {
    SchedParams p = {.kind = SCHED_NEXT_TOKEN,
                     .tokens = &token,
                     .n_tokens = 1,
                     .n_candidates = 1,
                     .temperature = 1};
    SchedSeq *job;
    int rc = sched_submit(s, &p, main_warm_notify, NULL, &job, err);
    if (rc) return rc;
    SchedState state = SCHED_RUNNING;
    SchedToken t;
    while (state == SCHED_RUNNING) {
        sched_seq_read(job, &t, 1, &state);
        if (state == SCHED_RUNNING) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (state == SCHED_DONE_ERROR) rc = sched_seq_error(job, err);
    sched_seq_release(job);
    return rc;
}

// Model i of a (its directory, and its own dtype, ctx-size and chat template where given,
// else the flags') into served (what the endpoints see) and mm (what main frees with main_unload,
// also after an error): its tokenizer, backend, weights, engine (warmed up by one step) and
// chat template. KG_OK or an error in err.
static int main_load(const MainArgs *a, size_t i, ApiModel *served, MainModel *mm, char *err) {
    const char *dir = a->models[i].dir;
    const KgDtype dtype = a->models[i].dtype_set ? a->models[i].dtype : a->dtype;
    const long ctx_size = a->models[i].ctx_size ? a->models[i].ctx_size : a->ctx_size;
    const char *chat = a->models[i].chat_template ? a->models[i].chat_template : a->chat_template;
    int rc;
    if ((rc = tok_open(&mm->tok, dir, err))) return rc;
    if (!(mm->be = main_backend(a, err))) return KG_EIO;
    KgBackend *be = mm->be;
    Gpt2 *gpt2 = &mm->gpt2;
    be->mixed = a->precision; // before any matmul, the warm-up's included
    if (a->kv_dtype != KG_DTYPE_AUTO) be->kv_dtype = a->kv_dtype; // before the pool is made
    const char *note = kg_precision_note(be);
    if (note && !a->quiet) log_msg(LOG_INFO, "%s", note);
    if ((rc = gpt2_open(gpt2, dir, be, dtype, err))) return rc;
    mm->gpt2_open = 1;
    if (!a->quiet)
        log_msg(LOG_INFO, "loaded %s%s%s", gpt2->src.what, gpt2->warning[0] ? "; " : "",
                gpt2->warning);
    size_t vocab = tok_vocab_size(mm->tok);
    if (vocab > gpt2->config.vocab_size)
        return kg_err(err, KG_EFORMAT, "%s: the tokenizer has %zu ids, the model only %zu", dir,
                      vocab, gpt2->config.vocab_size);
    // the config's special ids must be the tokenizer's too (a short tokenizer.json would
    // otherwise fail later as "token id 2 is outside the vocabulary")
    const struct {
        const char *name;
        int id;
    } special[] = {{"bos_token_id", gpt2->config.bos_id},
                   {"eos_token_id", gpt2->config.eos_id},
                   {"pad_token_id", gpt2->config.pad_id}};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        if (special[i].id >= 0 && (size_t)special[i].id >= vocab)
            return kg_err(err, KG_EFORMAT,
                          "%s: config.json's %s %d is not an id of the tokenizer there (it has "
                          "%zu)",
                          dir, special[i].name, special[i].id, vocab);
    size_t n_ctx = gpt2->config.n_ctx;
    if (ctx_size > 0 && (size_t)ctx_size < n_ctx) n_ctx = (size_t)ctx_size;
    size_t block_bytes = kv_block_bytes(&gpt2->config, be->kv_dtype);
    size_t kv_blocks = main_kv_blocks(a, block_bytes, gpt2->config.n_ctx);
    size_t one = kv_blocks_for(gpt2->config.n_ctx) + 1; // a context, and a block to copy into
    if (kv_blocks < one)
        return kg_err(err, KG_EINVAL,
                      "--kv-cache-mb %ld holds %zu blocks of %d positions; one context of %zu "
                      "positions needs %zu (%.1f MiB at --kv-dtype %s)",
                      a->kv_cache_mb, kv_blocks, KV_BLOCK_LEN, gpt2->config.n_ctx, one,
                      (double)(one * block_bytes) / (1 << 20), kg_dtype_name(be->kv_dtype));
    SchedOptions sopt = {.max_batch = (size_t)a->max_batch,
                         .max_queue = (size_t)a->max_queue,
                         .kv_blocks = kv_blocks,
                         .cache_blocks = ((size_t)a->cache_mb << 20) / block_bytes,
                         .max_prompt = n_ctx,
                         .step_tokens = (size_t)a->batch_tokens,
                         .speculate = !a->no_speculate};
    if ((rc = sched_start(&mm->sched, gpt2, mm->tok, &sopt, err))) return rc;
    int eos = gpt2->config.eos_id >= 0 ? gpt2->config.eos_id : 0;
    if ((rc = main_warm_up(mm->sched, eos, err))) return rc;
    served->sched = mm->sched;
    served->tok = mm->tok;
    served->n_ctx = n_ctx;
    served->vocab_size = vocab;
    served->weight_bytes = gpt2_weight_bytes(gpt2);
    served->device = be->ops->name;
    served->dtype = kg_dtype_name(gpt2->dtype);
    served->kv_dtype = kg_dtype_name(be->kv_dtype);
    return ep_chat_setup(served, dir, chat, &mm->chat, err);
}

// The line saying a loaded model serves (after /readyz turned 200: a script may wait for it).
static void main_log_ready(const ApiModel *served, const MainModel *mm) {
    const Gpt2Config *c = &mm->gpt2.config;
    SchedGauges g;
    sched_gauges(mm->sched, &g);
    log_msg(LOG_INFO,
            "ready: %s (%zu layers, %zu wide, n_ctx %zu, vocab %zu) on %s, precision %s, KV cache "
            "%s %.1f MiB (%zu blocks of %d positions)",
            served->name, c->n_layer, c->n_embd, served->n_ctx, served->vocab_size, served->device,
            mm->be->mixed == KG_BF16 ? "bf16" : "f32", served->kv_dtype,
            (double)g.kv.blocks * (double)g.kv.block_bytes / (1 << 20), g.kv.blocks, KV_BLOCK_LEN);
}

// Frees what main_load made, in reverse order; its engine must have stopped (sched_stop).
static void main_unload(MainModel *mm) {
    sched_free(mm->sched);
    chat_template_free(mm->chat);
    if (mm->gpt2_open) gpt2_close(&mm->gpt2);
    if (mm->be) kg_backend_free(mm->be);
    tok_free(mm->tok);
}

// SIGTERM and SIGINT write their number into this pipe; main reads it. A handler, not a
// blocked mask and sigwait(): a process-directed signal goes to any thread that does not block
// it, and libraries start threads before main runs (OpenBLAS's workers), which with the
// default action would kill the daemon at once and cut every stream.
static int g_signal_pipe[2] = {-1, -1};

static void main_on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(g_signal_pipe[1], &b, 1) < 0) { // full: signals are pending already
    }
    errno = saved;
}

// SIGBUS: the mapped model file shrank under the daemon (a cp or a truncate over it while it
// serves); the page it reads no longer exists. One line says so, then the default action
// (SA_RESETHAND) ends the process as before: nothing else can be done with the mapping.
static void main_on_sigbus(int sig) {
    static const char msg[] =
        "kogpt2d: SIGBUS: the model file changed or shrank while it was mapped (replace a served "
        "model by renaming a new file over it, never by writing into it); exiting\n";
    (void)sig;
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
    }
}

// The handlers above; SIGHUP ignored (nothing to reload: a terminal's hang-up must not kill
// the daemon), SIGPIPE ignored (a write to a closed socket fails instead). 0 or -1.
static int main_signals(void) {
    if (pipe(g_signal_pipe)) return -1;
    fcntl(g_signal_pipe[1], F_SETFL, O_NONBLOCK); // the handler never blocks
    for (int i = 0; i < 2; i++)
        fcntl(g_signal_pipe[i], F_SETFD, FD_CLOEXEC);
    struct sigaction sa = {.sa_handler = main_on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    struct sigaction bus = {.sa_handler = main_on_sigbus, .sa_flags = SA_RESETHAND};
    sigemptyset(&bus.sa_mask);
    return sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL) ||
                   sigaction(SIGBUS, &bus, NULL) || signal(SIGHUP, SIG_IGN) == SIG_ERR ||
                   signal(SIGPIPE, SIG_IGN) == SIG_ERR
               ? -1
               : 0;
}

// The next signal's number from the pipe, waiting up to timeout_ms (-1: forever); 0 if none.
static int main_next_signal(int timeout_ms) {
    struct pollfd pfd = {.fd = g_signal_pipe[0], .events = POLLIN};
    int n;
    while ((n = poll(&pfd, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    unsigned char b = 0;
    if (n > 0 && read(g_signal_pipe[0], &b, 1) == 1) return b;
    return 0;
}

// Waits until no request is in flight or the deadline (monotonic seconds) passes; a further
// SIGTERM or SIGINT ends the wait at once (returns 1).
static int main_wait_idle(SrvServer *srv, double deadline) {
    while (srv_in_flight(srv) > 0 && kg_now_s() < deadline) {
        int sig = main_next_signal(10);
        if (sig) {
            log_msg(LOG_WARN, "%s again: ending the requests in flight now", strsignal(sig));
            return 1;
        }
    }
    return 0;
}

// Serves as a says until SIGTERM/SIGINT: the process's exit code.
static int main_serve(MainArgs *a) {
    log_setup("kogpt2d", a->log_format); // every line from here on goes through log.h
    // A fixed mmap threshold: every allocation of 128 KiB or more (a request's body, its JSON,
    // the tokenizer's scratch for a long text) is its own mapping and goes back to the system
    // when freed. glibc's default raises the threshold to the largest block freed so far, so
    // those blocks then came from the threads' arenas and stayed: after rounds of 4 parallel
    // 1 MiB requests, idle RSS stayed at 81 MB instead of the 46 MB it started at (47 MB now).
    mallopt(M_MMAP_THRESHOLD, 128 << 10);

    if (main_signals()) {
        log_msg(LOG_ERROR, "signal handlers: %s", strerror(errno));
        return 1;
    }

    char err[KG_ERRLEN], web_buf[PATH_MAX];
    static ApiApp app;
    if (!(app.models = calloc(a->n_models, sizeof *app.models))) {
        log_msg(LOG_ERROR, "out of memory");
        return 1;
    }
    app.n_models = a->n_models;
    for (size_t i = 0; i < a->n_models; i++) { // made before the server starts
        app.models[i].name = a->models[i].name;
        app.models[i].score_memo = score_memo_new();
    }
    app.created = time(NULL);
    app.max_tokenize = (size_t)a->max_tokenize;
    app.max_jobs = (size_t)(a->max_batch + a->max_queue);
    const char *endpoints[METRICS_MAX_ENDPOINTS], *models[METRICS_MAX_MODELS];
    for (size_t i = 0; i < a->n_models && i < METRICS_MAX_MODELS; i++)
        models[i] = app.models[i].name;
    metrics_init(endpoints, api_endpoints(endpoints, METRICS_MAX_ENDPOINTS - 2), models,
                 a->n_models < METRICS_MAX_MODELS ? a->n_models : METRICS_MAX_MODELS);
    app.web_dir = main_web_dir(a->web_dir, web_buf, sizeof web_buf);
    size_t n_routes;
    const SrvRoute *routes = api_routes(&n_routes);

    SrvOptions so = {.host = a->host,
                     .port = (int)a->port,
                     .threads = (unsigned)a->http_threads,
                     .max_connections = (unsigned)a->max_connections,
                     .max_connections_per_ip = (unsigned)a->max_connections_per_ip,
                     .work_threads = (unsigned)a->work_threads,
                     .max_work_queue = (unsigned)a->max_work_queue,
                     .timeout_s = (unsigned)a->timeout_s,
                     .request_timeout_s = (unsigned)a->request_timeout_s,
                     .max_body = (size_t)a->max_body,
                     .api_keys = &a->keys,
                     .cors_origin = a->cors_origin,
                     .routes = routes,
                     .n_routes = n_routes,
                     .fallback = ep_static,
                     .app = &app,
                     .log = !a->quiet};
    SrvServer *srv;
    if (srv_start(&srv, &so, err)) {
        log_msg(LOG_ERROR, "%s", err);
        return 1;
    }
    app.srv = srv;
    log_msg(LOG_INFO, "listening on http://%s:%d (web: %s)", a->host, srv_port(srv),
            app.web_dir ? app.web_dir : "none");

    MainModel *mm = calloc(a->n_models, sizeof *mm);
    int rc = 1;
    if (!mm) {
        kg_err(err, KG_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < a->n_models; i++)
        if (main_load(a, i, &app.models[i], &mm[i], err)) goto fail;
    atomic_store(&app.ready, 1);
    for (size_t i = 0; i < a->n_models; i++)
        main_log_ready(&app.models[i], &mm[i]);

    int sig = main_next_signal(-1);
    log_msg(LOG_INFO, "%s: draining (up to %lds)", strsignal(sig), a->timeout_s);
    srv_drain(srv); // /readyz 503, no new connections
    double deadline = kg_now_s() + (double)a->timeout_s;
    if (main_wait_idle(srv, deadline)) deadline = kg_now_s(); // a second signal: no more waiting
    double left = deadline - kg_now_s();
    // cancels what is still running; a request still arriving on a kept-alive connection
    // gets 503 (the engine refuses it, and is freed only once the HTTP server has stopped)
    for (size_t i = 0; i < a->n_models; i++) // the time left, for the models one after another
        sched_stop(mm[i].sched, (left = deadline - kg_now_s()) > 0 ? (int)(left * 1e3) : 0);
    main_wait_idle(srv, kg_now_s() + 2); // cancelled requests answer their 503s
    rc = 0;
    goto out;
fail:
    log_msg(LOG_ERROR, "%s", err);
    srv_drain(srv);
out:
    for (size_t i = 0; mm && i < a->n_models; i++)
        sched_stop(mm[i].sched, 0);
    srv_stop(srv); // joins every HTTP thread: nothing can reach the engines after this
    for (size_t i = 0; i < a->n_models; i++) {
        if (mm) main_unload(&mm[i]);
        score_memo_free(app.models[i].score_memo); // once the HTTP server has stopped
    }
    free(mm);
    free(app.models);
    if (!rc) log_msg(LOG_INFO, "stopped");
    return rc;
}

int main(int argc, char **argv) {
    MainArgs a;
    int rc = main_args_parse(&a, argc, argv);
    if (rc < 0) rc = main_serve(&a);
    main_args_free(&a); // after the server and the models: their names are a's
    return rc;
}
