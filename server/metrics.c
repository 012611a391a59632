// metrics.c — counters and histograms behind one mutex; rendered as Prometheus text.
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Latency buckets in seconds: a cached click is ~1 ms, a long generation tens of seconds.
static const double METRICS_BUCKETS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,  0.5,    1,     2.5,  5,     10,   30};
#define METRICS_N_BUCKETS (sizeof METRICS_BUCKETS / sizeof METRICS_BUCKETS[0])

typedef struct {
    const char *name;
    int codes[METRICS_MAX_CODES];
    uint64_t code_count[METRICS_MAX_CODES];
    size_t n_codes;
    uint64_t bucket[METRICS_N_BUCKETS]; // non-cumulative; summed when rendered
    uint64_t count;
    double sum;
} MetricsEndpoint;

static struct {
    pthread_mutex_t mu;
    MetricsEndpoint ep[METRICS_MAX_ENDPOINTS];
    size_t n_ep;
    uint64_t prompt_tokens, cached_tokens, generated_tokens;
} M = {.mu = PTHREAD_MUTEX_INITIALIZER};

void metrics_init(const char *const *endpoints, size_t n) {
    pthread_mutex_lock(&M.mu);
    memset(M.ep, 0, sizeof M.ep);
    M.n_ep = 0;
    M.ep[M.n_ep++].name = "other";
    M.ep[M.n_ep++].name = "static";
    for (size_t i = 0; i < n && M.n_ep < METRICS_MAX_ENDPOINTS; i++)
        M.ep[M.n_ep++].name = endpoints[i];
    M.prompt_tokens = M.cached_tokens = M.generated_tokens = 0;
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
    size_t b = 0;
    while (b < METRICS_N_BUCKETS && seconds > METRICS_BUCKETS[b])
        b++;
    if (b < METRICS_N_BUCKETS) e->bucket[b]++;
    e->count++;
    e->sum += seconds;
    pthread_mutex_unlock(&M.mu);
}

void metrics_tokens(size_t prompt, size_t cached, size_t generated) {
    pthread_mutex_lock(&M.mu);
    M.prompt_tokens += prompt;
    M.cached_tokens += cached;
    M.generated_tokens += generated;
    pthread_mutex_unlock(&M.mu);
}

// A growing output buffer; on OOM it stops growing and remembers the failure.
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} MetricsBuf;

static void mb_printf(MetricsBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mb_printf(MetricsBuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n + 1;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p; // p may move
        b->cap = cap;
    }
}

static void mb_gauge(MetricsBuf *b, const char *name, const char *help, double v) {
    mb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static void mb_counter(MetricsBuf *b, const char *name, const char *help, uint64_t v) {
    mb_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
              (unsigned long long)v);
}

// Caller holds M.mu.
static void metrics_render_requests(MetricsBuf *b) {
    mb_printf(b, "# HELP kogpt2_requests_total HTTP requests by endpoint and status code.\n"
                 "# TYPE kogpt2_requests_total counter\n");
    for (size_t i = 0; i < M.n_ep; i++)
        for (size_t c = 0; c < M.ep[i].n_codes; c++)
            mb_printf(b, "kogpt2_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n", M.ep[i].name,
                      M.ep[i].codes[c], (unsigned long long)M.ep[i].code_count[c]);
    mb_printf(b, "# HELP kogpt2_request_duration_seconds Time from request to last byte.\n"
                 "# TYPE kogpt2_request_duration_seconds histogram\n");
    for (size_t i = 0; i < M.n_ep; i++) {
        const MetricsEndpoint *e = &M.ep[i];
        uint64_t cum = 0;
        for (size_t k = 0; k < METRICS_N_BUCKETS; k++) {
            cum += e->bucket[k];
            mb_printf(b, "kogpt2_request_duration_seconds_bucket{endpoint=\"%s\",le=\"%g\"} %llu\n",
                      e->name, METRICS_BUCKETS[k], (unsigned long long)cum);
        }
        mb_printf(b,
                  "kogpt2_request_duration_seconds_bucket{endpoint=\"%s\",le=\"+Inf\"} %llu\n"
                  "kogpt2_request_duration_seconds_sum{endpoint=\"%s\"} %.9g\n"
                  "kogpt2_request_duration_seconds_count{endpoint=\"%s\"} %llu\n",
                  e->name, (unsigned long long)e->count, e->name, e->sum, e->name,
                  (unsigned long long)e->count);
    }
}

char *metrics_render(const MetricsGauges *g, size_t *len) {
    MetricsBuf b = {.cap = 8192};
    if (!(b.p = malloc(b.cap))) return NULL;
    b.p[0] = '\0';
    pthread_mutex_lock(&M.mu);
    metrics_render_requests(&b);
    mb_counter(&b, "kogpt2_prompt_tokens_total", "Prompt tokens of finished jobs.",
               M.prompt_tokens);
    mb_counter(&b, "kogpt2_generated_tokens_total", "Tokens generated.", M.generated_tokens);
    mb_counter(&b, "kogpt2_cached_prompt_tokens_total",
               "Prompt tokens served from the prefix cache instead of computed.", M.cached_tokens);
    pthread_mutex_unlock(&M.mu);
    mb_gauge(&b, "kogpt2_queue_depth", "Jobs waiting for a batch slot.", (double)g->queue_depth);
    mb_gauge(&b, "kogpt2_running_jobs", "Jobs in the running batch.", (double)g->running);
    mb_gauge(&b, "kogpt2_batch_size", "Rows in the engine's last forward pass.",
             (double)g->batch_rows);
    mb_gauge(&b, "kogpt2_requests_in_flight", "HTTP requests begun and not completed.",
             (double)g->in_flight);
    mb_gauge(&b, "kogpt2_cache_bytes", "Prefix cache memory in use.", (double)g->cache_bytes);
    mb_gauge(&b, "kogpt2_cache_capacity_bytes", "Prefix cache memory limit.",
             (double)g->cache_capacity);
    mb_gauge(&b, "kogpt2_cache_entries", "Prefixes held by the cache.", (double)g->cache_entries);
    mb_gauge(&b, "kogpt2_ready", "1 when the model is loaded and the server not draining.",
             g->ready);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (len) *len = b.len;
    return b.p;
}
