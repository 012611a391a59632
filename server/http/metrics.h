// metrics.h — kogpt2d's Prometheus figures: requests by endpoint and status, latency
// histograms per endpoint, token counters per endpoint, time to first token and per output
// token, gauges filled in at scrape time, kogpt2_build_info{version,commit,device} (always 1)
// and the standard process_* figures.
//
// Threads: every function may be called from any thread (one mutex guards the table).
#ifndef METRICS_H
#define METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_ENDPOINTS 24
#define METRICS_MAX_CODES     16

// Gauges sampled when /metrics is scraped (from the engine and the HTTP layer).
typedef struct {
    size_t queue_depth, running, batch_rows, in_flight;
    size_t cache_bytes, cache_capacity, cache_entries;
    // the engines' KV pools: bytes, blocks by state, table entries naming them (above the
    // used blocks when sequences share blocks), jobs preempted for blocks so far
    size_t kv_bytes, kv_blocks_used, kv_blocks_cached, kv_blocks_free, kv_block_refs;
    uint64_t kv_preemptions;
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

// Resets the table and names the endpoints that get their own label ("other" and
// "static" are always present). names must outlive the metrics (string literals).
void metrics_init(const char *const *endpoints, size_t n);

// One finished request: endpoint label (unknown names count as "other"), status, seconds.
void metrics_request(const char *endpoint, int status, double seconds);
// Tokens of one finished engine sequence of an endpoint, and the time it spent decoding.
void metrics_tokens(const char *endpoint, size_t prompt, size_t cached, size_t generated,
                    double decode_ms);
// A generation's time to first token (from its submission).
void metrics_first_token(double seconds);
// n more turned away for reason why.
void metrics_reject(MetricsReject why, size_t n);

// Renders the text exposition format (version 0.0.4) into a malloc'd string (free());
// NULL on OOM.
char *metrics_render(const MetricsGauges *g, size_t *len);

#endif
