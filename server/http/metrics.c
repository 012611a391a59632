// metrics.c — counters and histograms behind one mutex; rendered as Prometheus text into one
// KgBuf (base/buf.h).
#include "metrics.h"

#include <dirent.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/kg.h"

// Latency buckets in seconds: a cached click is ~1 ms, a long generation tens of seconds
// (also those of the time to first token).
static const double METRICS_BUCKETS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,  0.5,    1,     2.5,  5,     10,   30};
#define METRICS_N_BUCKETS (sizeof METRICS_BUCKETS / sizeof METRICS_BUCKETS[0])
// Time per output token in seconds: ~1 ms on a GPU, ~10-100 ms on two CPU cores.
static const double METRICS_TPOT_BUCKETS[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                              0.05,   0.1,   0.2,   0.5,   1};
#define METRICS_N_TPOT (sizeof METRICS_TPOT_BUCKETS / sizeof METRICS_TPOT_BUCKETS[0])

// A histogram: non-cumulative bucket counts (summed when rendered), count and sum.
typedef struct {
    uint64_t bucket[METRICS_N_BUCKETS > METRICS_N_TPOT ? METRICS_N_BUCKETS : METRICS_N_TPOT];
    uint64_t count;
    double sum;
} MetricsHist;

static void hist_observe(MetricsHist *h, const double *bounds, size_t n, double v) {
    size_t b = 0;
    while (b < n && v > bounds[b])
        b++;
    if (b < n) h->bucket[b]++;
    h->count++;
    h->sum += v;
}

// The token counters of kogpt2_{prompt,generated,cached_prompt}_tokens_total, in that order.
enum { METRICS_PROMPT, METRICS_GENERATED, METRICS_CACHED, METRICS_N_TOKENS };

typedef struct {
    const char *name;
    int codes[METRICS_MAX_CODES];
    uint64_t code_count[METRICS_MAX_CODES];
    size_t n_codes;
    MetricsHist duration;
    uint64_t tokens[METRICS_MAX_MODELS][METRICS_N_TOKENS]; // per model
} MetricsEndpoint;

// One model's engine figures over time.
typedef struct {
    const char *name;
    MetricsHist first_token, per_output_token;
    double decode_seconds;
} MetricsModel;

static struct {
    pthread_mutex_t mu;
    MetricsEndpoint ep[METRICS_MAX_ENDPOINTS];
    size_t n_ep;
    MetricsModel model[METRICS_MAX_MODELS];
    size_t n_models;
    uint64_t rejected[METRICS_REJ_N];
    time_t start_time;
} M = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const char *const METRICS_REJ_NAMES[METRICS_REJ_N] = {
    "max_connections", "per_ip", "closed", "shed", "request_timeout", "work_queue"};

void metrics_init(const char *const *endpoints, size_t n, const char *const *models,
                  size_t n_models) {
    pthread_mutex_lock(&M.mu);
    memset(M.ep, 0, sizeof M.ep);
    M.n_ep = 0;
    M.ep[M.n_ep++].name = "other";
    M.ep[M.n_ep++].name = "static";
    for (size_t i = 0; i < n && M.n_ep < METRICS_MAX_ENDPOINTS; i++)
        M.ep[M.n_ep++].name = endpoints[i];
    memset(M.model, 0, sizeof M.model);
    M.n_models = 0;
    for (size_t i = 0; i < n_models && M.n_models < METRICS_MAX_MODELS; i++)
        M.model[M.n_models++].name = models[i];
    if (!M.n_models) M.model[M.n_models++].name = "default";
    memset(M.rejected, 0, sizeof M.rejected);
    M.start_time = time(NULL);
    pthread_mutex_unlock(&M.mu);
}

// The endpoint's slot; "other" (slot 0) for unknown names. Caller holds M.mu.
static MetricsEndpoint *metrics_find(const char *name) {
    for (size_t i = 0; name && i < M.n_ep; i++)
        if (!strcmp(M.ep[i].name, name)) return &M.ep[i];
    return &M.ep[0];
}

void metrics_request(const char *endpoint, int status, double seconds) {
    pthread_mutex_lock(&M.mu);
    if (M.n_ep == 0) M.ep[M.n_ep++].name = "other";
    MetricsEndpoint *e = metrics_find(endpoint);
    size_t c = 0;
    while (c < e->n_codes && e->codes[c] != status)
        c++;
    if (c == e->n_codes && c < METRICS_MAX_CODES) e->codes[e->n_codes++] = status;
    if (c < METRICS_MAX_CODES) e->code_count[c]++;
    hist_observe(&e->duration, METRICS_BUCKETS, METRICS_N_BUCKETS, seconds);
    pthread_mutex_unlock(&M.mu);
}

// The model's slot (the first for an unknown name). Caller holds M.mu.
static size_t metrics_model(const char *name) {
    if (M.n_models == 0) M.model[M.n_models++].name = "default";
    for (size_t i = 0; name && i < M.n_models; i++)
        if (!strcmp(M.model[i].name, name)) return i;
    return 0;
}

void metrics_tokens(const char *endpoint, const char *model, size_t prompt, size_t cached,
                    size_t generated, double decode_ms) {
    pthread_mutex_lock(&M.mu);
    if (M.n_ep == 0) M.ep[M.n_ep++].name = "other";
    size_t k = metrics_model(model);
    uint64_t *t = metrics_find(endpoint)->tokens[k];
    t[METRICS_PROMPT] += prompt;
    t[METRICS_CACHED] += cached;
    t[METRICS_GENERATED] += generated;
    M.model[k].decode_seconds += decode_ms / 1e3;
    if (generated > 1) // the first token's time is the prefill's
        hist_observe(&M.model[k].per_output_token, METRICS_TPOT_BUCKETS, METRICS_N_TPOT,
                     decode_ms / 1e3 / (double)(generated - 1));
    pthread_mutex_unlock(&M.mu);
}

void metrics_first_token(const char *model, double seconds) {
    pthread_mutex_lock(&M.mu);
    size_t k = metrics_model(model);
    hist_observe(&M.model[k].first_token, METRICS_BUCKETS, METRICS_N_BUCKETS, seconds);
    pthread_mutex_unlock(&M.mu);
}

void metrics_reject(MetricsReject why, size_t n) {
    pthread_mutex_lock(&M.mu);
    M.rejected[why] += n;
    pthread_mutex_unlock(&M.mu);
}

// --- the text exposition: each part returns KG_OK or KG_ENOMEM (b then holds a part) ---

static int mb_gauge(KgBuf *b, const char *name, const char *help, double v) {
    return buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

// `model="NAME"` into out (cap bytes), NAME escaped as the text format wants (\\, \", \n): a
// model's name is the operator's, any bytes. Returns out.
static const char *mb_model_label(char *out, size_t cap, const char *name) {
    size_t n = (size_t)snprintf(out, cap, "model=\"");
    for (const char *p = name; *p && n + 4 < cap; p++) {
        if (*p == '\\' || *p == '"' || *p == '\n') out[n++] = '\\';
        out[n++] = *p == '\n' ? 'n' : *p;
    }
    snprintf(out + n, cap - n, "\"");
    return out;
}

// One histogram's _bucket, _sum and _count lines; label is "" or `name="value"`.
static int mb_hist(KgBuf *b, const char *name, const char *label, const MetricsHist *h,
                   const double *bounds, size_t n) {
    const char *sep = label[0] ? "," : "";
    uint64_t cum = 0;
    for (size_t k = 0; k < n; k++) {
        cum += h->bucket[k];
        if (buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, label, sep, bounds[k],
                       (unsigned long long)cum))
            return KG_ENOMEM;
    }
    if (buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, label, sep,
                   (unsigned long long)h->count))
        return KG_ENOMEM;
    if (label[0])
        return buf_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, label, h->sum, name,
                          label, (unsigned long long)h->count);
    return buf_printf(b, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name,
                      (unsigned long long)h->count);
}

// Requests, durations and tokens by endpoint. Caller holds M.mu.
static int metrics_render_requests(KgBuf *b) {
    if (buf_printf(b, "# HELP kogpt2_requests_total HTTP requests by endpoint and status code.\n"
                      "# TYPE kogpt2_requests_total counter\n"))
        return KG_ENOMEM;
    for (size_t i = 0; i < M.n_ep; i++)
        for (size_t c = 0; c < M.ep[i].n_codes; c++)
            if (buf_printf(b, "kogpt2_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n",
                           M.ep[i].name, M.ep[i].codes[c],
                           (unsigned long long)M.ep[i].code_count[c]))
                return KG_ENOMEM;
    if (buf_printf(b, "# HELP kogpt2_request_duration_seconds Time from request to last byte.\n"
                      "# TYPE kogpt2_request_duration_seconds histogram\n"))
        return KG_ENOMEM;
    for (size_t i = 0; i < M.n_ep; i++) {
        char label[96];
        snprintf(label, sizeof label, "endpoint=\"%s\"", M.ep[i].name);
        if (mb_hist(b, "kogpt2_request_duration_seconds", label, &M.ep[i].duration, METRICS_BUCKETS,
                    METRICS_N_BUCKETS))
            return KG_ENOMEM;
    }
    static const char *const TOKENS[] = {
        "prompt",        "Prompt tokens of finished jobs.",
        "generated",     "Tokens generated.",
        "cached_prompt", "Prompt tokens served from the prefix cache."};
    static const int SLOT[] = {METRICS_PROMPT, METRICS_GENERATED, METRICS_CACHED};
    for (size_t t = 0; t < 3; t++) {
        if (buf_printf(b,
                       "# HELP kogpt2_%s_tokens_total %s\n# TYPE kogpt2_%s_tokens_total counter\n",
                       TOKENS[2 * t], TOKENS[2 * t + 1], TOKENS[2 * t]))
            return KG_ENOMEM;
        for (size_t i = 0; i < M.n_ep; i++)
            for (size_t k = 0; k < M.n_models; k++) {
                char model[160];
                if (buf_printf(b, "kogpt2_%s_tokens_total{endpoint=\"%s\",%s} %llu\n",
                               TOKENS[2 * t], M.ep[i].name,
                               mb_model_label(model, sizeof model, M.model[k].name),
                               (unsigned long long)M.ep[i].tokens[k][SLOT[t]]))
                    return KG_ENOMEM;
            }
    }
    return KG_OK;
}

// Time to first token, time per output token and decode time per model, and what the limits
// turned away. Caller holds M.mu.
static int metrics_render_engine(KgBuf *b) {
    if (buf_printf(b, "# HELP kogpt2_time_to_first_token_seconds From a generation's submission "
                      "to its first token.\n# TYPE kogpt2_time_to_first_token_seconds histogram\n"))
        return KG_ENOMEM;
    char model[160];
    for (size_t k = 0; k < M.n_models; k++)
        if (mb_hist(b, "kogpt2_time_to_first_token_seconds",
                    mb_model_label(model, sizeof model, M.model[k].name), &M.model[k].first_token,
                    METRICS_BUCKETS, METRICS_N_BUCKETS))
            return KG_ENOMEM;
    if (buf_printf(b, "# HELP kogpt2_time_per_output_token_seconds Decode time per generated "
                      "token after the first, per job.\n"
                      "# TYPE kogpt2_time_per_output_token_seconds histogram\n"))
        return KG_ENOMEM;
    for (size_t k = 0; k < M.n_models; k++)
        if (mb_hist(b, "kogpt2_time_per_output_token_seconds",
                    mb_model_label(model, sizeof model, M.model[k].name),
                    &M.model[k].per_output_token, METRICS_TPOT_BUCKETS, METRICS_N_TPOT))
            return KG_ENOMEM;
    if (buf_printf(b, "# HELP kogpt2_decode_seconds_total Time jobs spent decoding; decode tokens "
                      "per second = rate(kogpt2_generated_tokens_total) / rate(this).\n"
                      "# TYPE kogpt2_decode_seconds_total counter\n"))
        return KG_ENOMEM;
    for (size_t k = 0; k < M.n_models; k++)
        if (buf_printf(b, "kogpt2_decode_seconds_total{%s} %.6f\n",
                       mb_model_label(model, sizeof model, M.model[k].name),
                       M.model[k].decode_seconds))
            return KG_ENOMEM;
    if (buf_printf(b, "# HELP kogpt2_rejected_total Requests and connections turned away by the "
                      "server's limits, by reason.\n# TYPE kogpt2_rejected_total counter\n"))
        return KG_ENOMEM;
    for (size_t i = 0; i < METRICS_REJ_N; i++)
        if (buf_printf(b, "kogpt2_rejected_total{reason=\"%s\"} %llu\n", METRICS_REJ_NAMES[i],
                       (unsigned long long)M.rejected[i]))
            return KG_ENOMEM;
    return KG_OK;
}

// The standard process_* figures, from /proc (Linux).
static int metrics_render_process(KgBuf *b) {
    long page = sysconf(_SC_PAGESIZE);
    unsigned long long vm_pages = 0, rss_pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &vm_pages, &rss_pages) != 2) vm_pages = rss_pages = 0;
        fclose(f);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                 ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
    size_t fds = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        fds += e->d_name[0] != '.';
    if (d) {
        closedir(d);
        fds--; // the directory's own descriptor
    }
    struct rlimit rl;
    double max_fds = getrlimit(RLIMIT_NOFILE, &rl) ? 0 : (double)rl.rlim_cur;
    if (mb_gauge(b, "process_resident_memory_bytes", "Resident memory size in bytes.",
                 (double)rss_pages * (double)page))
        return KG_ENOMEM;
    if (mb_gauge(b, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
                 (double)vm_pages * (double)page))
        return KG_ENOMEM;
    if (buf_printf(b,
                   "# HELP process_cpu_seconds_total Total user and system CPU time in seconds.\n"
                   "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.6f\n",
                   cpu))
        return KG_ENOMEM;
    if (mb_gauge(b, "process_open_fds", "Number of open file descriptors.", (double)fds))
        return KG_ENOMEM;
    if (mb_gauge(b, "process_max_fds", "Maximum number of open file descriptors.", max_fds))
        return KG_ENOMEM;
    return mb_gauge(b, "process_start_time_seconds",
                    "Start time of the process since the Unix epoch.", (double)M.start_time);
}

// The engines' gauges: one (name, help, field) row each, a line per model.
static int metrics_render_engines(KgBuf *b, const MetricsGauges *g) {
    const struct {
        const char *name, *help;
        size_t offset;
    } ENGINE[] = {
        {"kogpt2_queue_depth", "Jobs waiting for a batch slot.",
         offsetof(MetricsEngine, queue_depth)},
        {"kogpt2_running_jobs", "Jobs in the running batch.", offsetof(MetricsEngine, running)},
        {"kogpt2_batch_size", "Rows in the engine's last forward pass.",
         offsetof(MetricsEngine, batch_rows)},
        {"kogpt2_cache_bytes", "Prefix cache memory in use: its KV blocks and remembered logits.",
         offsetof(MetricsEngine, cache_bytes)},
        {"kogpt2_cache_capacity_bytes",
         "Prefix cache memory limit (--cache-mb of the KV cache, and the remembered logits).",
         offsetof(MetricsEngine, cache_capacity)},
        {"kogpt2_cache_entries", "KV blocks held by the prefix cache.",
         offsetof(MetricsEngine, cache_entries)},
        {"kogpt2_kv_cache_bytes", "The KV cache pools' size (memory is used as blocks fill).",
         offsetof(MetricsEngine, kv_bytes)},
        {"kogpt2_kv_block_refs",
         "Block table entries of the running sequences: above the used blocks when they share.",
         offsetof(MetricsEngine, kv_block_refs)},
    };
    for (size_t i = 0; i < sizeof ENGINE / sizeof *ENGINE; i++) {
        if (buf_printf(b, "# HELP %s %s Per model.\n# TYPE %s gauge\n", ENGINE[i].name,
                       ENGINE[i].help, ENGINE[i].name))
            return KG_ENOMEM;
        for (size_t k = 0; k < g->n_engines; k++) {
            const MetricsEngine *e = &g->engines[k];
            char model[160];
            size_t v = *(const size_t *)((const char *)e + ENGINE[i].offset);
            if (buf_printf(b, "%s{%s} %zu\n", ENGINE[i].name,
                           mb_model_label(model, sizeof model, e->model ? e->model : "default"), v))
                return KG_ENOMEM;
        }
    }
    if (buf_printf(b, "# HELP kogpt2_kv_blocks KV cache blocks of 16 positions: held by "
                      "sequences, kept for their prefix only, or free. Per model.\n"
                      "# TYPE kogpt2_kv_blocks gauge\n"))
        return KG_ENOMEM;
    for (size_t k = 0; k < g->n_engines; k++) {
        const MetricsEngine *e = &g->engines[k];
        char model[160];
        mb_model_label(model, sizeof model, e->model ? e->model : "default");
        if (buf_printf(b,
                       "kogpt2_kv_blocks{%s,state=\"used\"} %zu\n"
                       "kogpt2_kv_blocks{%s,state=\"cached\"} %zu\n"
                       "kogpt2_kv_blocks{%s,state=\"free\"} %zu\n",
                       model, e->kv_blocks_used, model, e->kv_blocks_cached, model,
                       e->kv_blocks_free))
            return KG_ENOMEM;
    }
    if (buf_printf(b, "# HELP kogpt2_kv_preemptions_total Sequences whose KV blocks were taken "
                      "back for a step and recomputed later. Per model.\n"
                      "# TYPE kogpt2_kv_preemptions_total counter\n"))
        return KG_ENOMEM;
    for (size_t k = 0; k < g->n_engines; k++) {
        const MetricsEngine *e = &g->engines[k];
        char model[160];
        if (buf_printf(b, "kogpt2_kv_preemptions_total{%s} %llu\n",
                       mb_model_label(model, sizeof model, e->model ? e->model : "default"),
                       (unsigned long long)e->kv_preemptions))
            return KG_ENOMEM;
    }
    return KG_OK;
}

// The gauges sampled at scrape time, in the page's order.
static int metrics_render_gauges(KgBuf *b, const MetricsGauges *g) {
    if (metrics_render_engines(b, g)) return KG_ENOMEM;
    if (mb_gauge(b, "kogpt2_requests_in_flight", "HTTP requests begun and not completed.",
                 (double)g->in_flight))
        return KG_ENOMEM;
    if (buf_printf(b,
                   "# HELP kogpt2_connections Open connections: admitted, or refused (answered "
                   "503 and closed).\n# TYPE kogpt2_connections gauge\n"
                   "kogpt2_connections{state=\"admitted\"} %zu\n"
                   "kogpt2_connections{state=\"refused\"} %zu\n",
                   g->conns_admitted, g->conns_refused))
        return KG_ENOMEM;
    if (mb_gauge(b, "kogpt2_work_queue_depth",
                 "Requests waiting for a work thread (parsing, tokenizing, chat templates).",
                 (double)g->work_queued))
        return KG_ENOMEM;
    if (mb_gauge(b, "kogpt2_work_running", "Requests on a work thread now.",
                 (double)g->work_running))
        return KG_ENOMEM;
    if (mb_gauge(b, "kogpt2_ready", "1 when the model is loaded and the server not draining.",
                 g->ready))
        return KG_ENOMEM;
    return buf_printf(b,
                      "# HELP kogpt2_build_info The build and the device it serves on; always 1.\n"
                      "# TYPE kogpt2_build_info gauge\n"
                      "kogpt2_build_info{version=\"%s\",commit=\"%s\",device=\"%s\"} 1\n",
                      kg_version(), kg_commit(), g->device ? g->device : "none");
}

char *metrics_render(const MetricsGauges *g, size_t *len) {
    KgBuf b = {0};
    if (buf_reserve(&b, 8192)) return NULL; // most pages fit: one allocation
    pthread_mutex_lock(&M.mu);
    int rc = metrics_render_requests(&b);
    if (!rc) rc = metrics_render_engine(&b);
    pthread_mutex_unlock(&M.mu);
    if (!rc) rc = metrics_render_process(&b);
    if (!rc) rc = metrics_render_gauges(&b, g);
    if (rc) {
        buf_free(&b);
        return NULL;
    }
    return buf_take(&b, len);
}
