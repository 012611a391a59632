// metrics.h — kogpt2d's Prometheus figures: requests by endpoint and status, latency
// histograms per endpoint, token counters per endpoint and model, time to first token and per
// output token and decode time per model, gauges filled in at scrape time (the engine's per
// model), kogpt2_build_info{version,commit,device} (always 1) and the standard process_* figures.
// A daemon serving several models labels each engine's figures model="NAME" (the API's name),
// never sums them: an operator sees which model's queue grows.
//
// Threads: every function may be called from any thread (one mutex guards the table).
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_ENDPOINTS 24
#define METRICS_MAX_CODES     16
#define METRICS_MAX_MODELS    8 // kogpt2d's --model at most

// One model's engine, sampled when /metrics is scraped: its gauges, labelled model="NAME".
typedef struct {
    const char *model; // the name requests give (must outlive the render)
    size_t queue_depth, running, batch_rows;
    size_t cache_bytes, cache_capacity, cache_entries;
    // its KV pool: bytes, blocks by state, table entries naming them (above the used blocks
    // when sequences share blocks), jobs preempted for blocks so far
    size_t kv_bytes, kv_blocks_used, kv_blocks_cached, kv_blocks_free, kv_block_refs;
    uint64_t kv_preemptions;
} MetricsEngine;

// Gauges sampled when /metrics is scraped (from the engines and the HTTP layer).
typedef struct {
    MetricsEngine engines[METRICS_MAX_MODELS]; // n_engines of them (0 while loading)
    size_t n_engines;
    size_t in_flight;
    size_t conns_admitted, conns_refused; // open connections (http.h's limits)
    size_t work_queued, work_running;     // the work pool (workpool.h)
    int ready;
    const char *device; // the backend serving (kogpt2_build_info's label); NULL: "none" yet
} MetricsGauges;

// Why a request or connection was turned away (kogpt2_rejected_total{reason}).
typedef enum {
    METRICS_REJ_MAX_CONNECTIONS, // 503: a connection over --max-connections
    METRICS_REJ_PER_IP,          // 503: over --max-connections-per-ip
    METRICS_REJ_CLOSED,          // a refused connection still waiting for its request,
                                 // closed to make room for a new one (admit.h)
    METRICS_REJ_SHED,            // an idle or slow connection closed to admit a new one
    METRICS_REJ_REQUEST_TIMEOUT, // the request did not arrive in time (or a refused one's)
    METRICS_REJ_WORK_QUEUE,      // 503: every work thread busy and --max-work-queue waiting
    METRICS_REJ_N
} MetricsReject;

// Resets the table, names the endpoints that get their own label ("other" and "static" are
// always present) and the models (at most METRICS_MAX_MODELS; none: one unnamed, "default").
// The names must outlive the metrics.
void metrics_init(const char *const *endpoints, size_t n, const char *const *models,
                  size_t n_models);

// One finished request: endpoint label (unknown names count as "other"), status, seconds.
void metrics_request(const char *endpoint, int status, double seconds);
// Tokens of one finished engine sequence of an endpoint on a model (an unknown model counts as the
// first), and the time it spent decoding.
void metrics_tokens(const char *endpoint, const char *model, size_t prompt, size_t cached,
                    size_t generated, double decode_ms);
// A generation's time to first token (from its submission) on a model.
void metrics_first_token(const char *model, double seconds);
// n more turned away for reason why.
void metrics_reject(MetricsReject why, size_t n);

// Renders the text exposition format (version 0.0.4) into a malloc'd string (free());
// NULL on OOM.
char *metrics_render(const MetricsGauges *g, size_t *len);

#endif
