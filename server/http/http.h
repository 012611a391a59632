// http.h — kogpt2d's HTTP layer over libmicrohttpd (MHD): per-request state, the body
// reader, the one reply helper and error builder, Server-Sent Events, static files.
//
// A request goes through srv_access() three ways (MHD's access-handler protocol): the first
// call makes a SrvReq and looks up the route; middle calls copy the body (up to max_body);
// the last call checks method, auth (Authorization: Bearer KEY or x-api-key: KEY, against
// auth.h's keys), content type and JSON, then runs the route's handler. Every reply carries
// the request's X-Request-Id (SrvReq.request_id), and its line goes to log.h's request log.
// Per-request state is freed only in the completion callback, which runs on every path.
//
// Threads: handlers run on MHD's worker threads, except those of SRV_ROUTE_WORK routes: MHD's
// thread suspends the request and a work pool thread (workpool.h) parses the body and runs
// the handler, so that a megabyte to tokenize never holds up /healthz. A reply made there is
// held and queued by MHD's thread once the request resumes; srv_wait() there returns 1
// without suspending (the request is suspended already; MHD calls the route's resume once
// the handler has returned). srv_wake() may be called from any thread (the engine's notify
// callback) and resumes a suspended request.
//
// Limits per connection (counted when MHD accepts it; nginx's limit_conn answers the same):
// admit.h has the rules and makes the decision (max_connections admitted, max_connections_per_ip
// from one address, refusals answered 503 + Retry-After + Connection: close, room made by
// closing the connection that has waited longest for its request, never the new one); here
// they are applied. timeout_s without any byte either way closes a connection (MHD); and
// request_timeout_s bounds the time from the connection's opening, or the end of its previous
// reply, until the request (line, headers, body) has fully arrived: a watchdog thread shuts a
// slower one down, so a client dripping a byte a second cannot hold a connection for long; a
// refused connection's request must arrive within SRV_REFUSED_GRACE_S (a refusal must not hold
// a slot).
#ifndef HTTP_H
#define HTTP_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "auth.h"
#include "base/buf.h"
#include "base/kg.h"

#define SRV_MAX_BODY        1048576      // default --max-body (1 MiB; a literal: --help shows it)
#define SRV_LINGER_BYTES    (64u << 20)  // a body over --max-body: read and dropped up to this
#define SRV_MAX_CONNECTIONS 256          // default --max-connections
#define SRV_STREAM_BLOCK    4096         // bytes MHD asks a streaming reader for at most
#define SRV_REFUSED_GRACE_S 2.0          // a refused connection's request must arrive by then
#define SRV_WORK_THREADS    2            // default --work-threads
#define SRV_MAX_WORK_QUEUE  64           // default --max-work-queue
#define SRV_TRIM_AFTER_BODY (256u << 10) // a work body this large: malloc_trim once idle (http.c)
#define SRV_REQUEST_ID_MAX  128          // bytes of an X-Request-Id kept; a longer one is replaced
// Every text type says its charset: JSON needs none (RFC 8259: UTF-8), but clients that guess
// read text without one as ISO-8859-1 (Python requests' iter_lines, decode_unicode=True)
#define SRV_TYPE_JSON "application/json; charset=utf-8"
#define SRV_TYPE_SSE  "text/event-stream; charset=utf-8"
#define SRV_TYPE_TEXT "text/plain; charset=utf-8"

typedef struct SrvReq SrvReq;
typedef struct SrvServer SrvServer;
typedef struct SrvConn SrvConn; // one open connection (conns.h)

// A route's handler runs on the last call with the parsed JSON body (NULL for GET) and
// answers through srv_reply_*() or srv_stream_start(); it returns what MHD expects.
typedef enum MHD_Result (*SrvHandler)(SrvReq *r, const cJSON *j_req);

enum {
    SRV_ROUTE_JSON = 1,   // POST body must be a JSON object (415 / 400 otherwise)
    SRV_ROUTE_OPEN = 2,   // no API key needed (health, readiness, metrics)
    SRV_ROUTE_PREFIX = 4, // path is a prefix ("/v1/models/" matches "/v1/models/ID")
    SRV_ROUTE_WORK = 8,   // JSON parsing and the handler run on the work pool (see above)
    SRV_ROUTE_TGI = 16,   // errors in TGI's shape {"error", "error_type"}: its clients read it
    SRV_ROUTE_GET_FALLBACK = 32 // a GET (or HEAD) of the path is the fallback's, not a 405 (the
                                // Explorer's page at "/" beside TGI's POST /)
};

typedef struct {
    const char *method; // "GET" or "POST"
    const char *path;   // exact match, or a prefix with SRV_ROUTE_PREFIX
    SrvHandler handler;
    int flags; // SRV_ROUTE_*
} SrvRoute;

// What the body reader concluded; each value maps to one status at the end.
typedef enum {
    SRV_BODY_OK,        // still reading, or complete
    SRV_BODY_TOO_LARGE, // 413: over max_body; the rest is drained and dropped
    SRV_BODY_NO_MEMORY  // 503: could not grow the buffer
} SrvBodyState;

// Where a SRV_ROUTE_WORK handler is (SrvReq.work.state).
enum { SRV_WORK_NONE, SRV_WORK_RUNNING, SRV_WORK_DONE };

// A streaming reply's source: writes up to max bytes of the next event(s) into buf and
// returns the count, 0 when nothing is ready yet (the request is then suspended until
// srv_wake()), or MHD_CONTENT_READER_END_OF_STREAM at the end.
typedef ssize_t (*SrvPull)(SrvReq *r, char *buf, size_t max);

// Per-request state (MHD's *req_cls). Owned by http.c; handlers may set ctx and done.
struct SrvReq {
    struct MHD_Connection *conn;
    const char *url; // the decoded path (MHD's; valid until the request completes)
    SrvServer *srv;
    SrvConn *sc;           // the connection's state (NULL if it could not be allocated)
    const SrvRoute *route; // NULL: static file or unknown
    const char *endpoint;  // metrics label: the route's path, "static" or NULL ("other")
    char method[8];
    char path[256]; // truncated for logs and metrics only; routing uses the full URL
    // the client's X-Request-Id when it is 1..SRV_REQUEST_ID_MAX bytes of visible ASCII, else
    // 32 random hex digits: echoed on every reply and written in the request's log line
    char request_id[SRV_REQUEST_ID_MAX + 1];
    double t_start; // monotonic seconds
    KgBuf body;     // the body so far (at most max_body bytes), NUL-terminated
    size_t dropped; // body bytes read past the limit and dropped
    SrvBodyState body_state;
    int status; // set when a reply is queued
    size_t bytes_out;
    // waiting on the engine (suspend/resume)
    pthread_mutex_t mu;
    int suspended, woken;
    // the route's own state: done(r, aborted) frees it when the request completes
    void *ctx;
    void (*done)(SrvReq *r, int aborted);
    // set while the handler waits on the engine: MHD's next call (after srv_wake) runs it
    enum MHD_Result (*resume)(SrvReq *r);
    SrvPull pull; // a streaming reply's source
    // a SRV_ROUTE_WORK handler's run on the work pool (state under mu)
    struct {
        int state;                 // SRV_WORK_NONE, _RUNNING (on the pool), _DONE (to finish)
        enum MHD_Result ret;       // what the handler returned
        struct MHD_Response *resp; // its reply, queued by MHD's thread on resume
        int status;
    } work;
};

// --- the server ---
typedef struct {
    const char *host;                // NULL or "0.0.0.0": any
    int port;                        // 0: pick a free one (see srv_port)
    unsigned threads;                // MHD worker threads
    unsigned max_connections;        // admitted connections; more are refused (0: 256)
    unsigned max_connections_per_ip; // admitted from one address (0: no limit)
    unsigned timeout_s;              // idle connection timeout (slow clients)
    unsigned request_timeout_s;      // a whole request must arrive within this (0: no limit)
    unsigned work_threads;           // the work pool's threads (0: SRV_ROUTE_WORK runs on MHD's)
    unsigned max_work_queue;         // handlers waiting for a work thread; more get 503
    size_t max_body;
    const AuthKeys *api_keys; // NULL or none: no auth (auth.h)
    const char *cors_origin;  // NULL: no CORS headers
    // what is served: the routes, and the handler of the GETs outside /v1/ that no route
    // has (static files; NULL: 404)
    const SrvRoute *routes;
    size_t n_routes;
    SrvHandler fallback;
    void *app; // the handlers' shared state (srv_app)
    int log;   // 1: log.h's request lines, MHD's messages and the watchdog's; 0: none (--quiet)
} SrvOptions;

// Binds and starts MHD's threads. KG_OK and *out; KG_EIO with err (e.g. port in use).
int srv_start(SrvServer **out, const SrvOptions *opt, char *err);
int srv_port(const SrvServer *s);
void *srv_app(const SrvServer *s);
// Draining: stops accepting connections, replies carry "Connection: close", /readyz is 503.
void srv_drain(SrvServer *s);
int srv_draining(const SrvServer *s);
// Requests begun and not yet completed.
size_t srv_in_flight(const SrvServer *s);

// Connections and work-pool figures for /metrics.
typedef struct {
    size_t admitted, refused; // open connections, admitted and refused (see the limits above)
    size_t work_queued, work_running;
} SrvGauges;
void srv_gauges(SrvServer *s, SrvGauges *g);
// Stops MHD (call after every request completed or the engine cancelled them) and frees s.
void srv_stop(SrvServer *s);

// --- replies (one helper; every one carries the security and CORS headers) ---
// Sends body (copied) with the given status and content type; extra headers as
// "Name", "value" pairs, NULL-terminated.
enum MHD_Result srv_reply(SrvReq *r, int status, const char *type, const char *body, size_t len,
                          ...);
// Prints j_root (consumed) as JSON.
enum MHD_Result srv_reply_json(SrvReq *r, int status, cJSON *j_root);
// The one error object, also for a stream's error event: {"error":{"code" (the HTTP status),
// "type" (OpenAI's: invalid_request_error, authentication_error, rate_limit_error,
// server_error, ...), "message", "param" (the request field at fault, or null)}}; NULL on OOM.
cJSON *srv_error_json(int status, const char *message, const char *param);
// The error object in the shape r's route answers in: srv_error_json's, or on a SRV_ROUTE_TGI
// route text-generation-inference's {"error": message, "error_type" (validation, overloaded,
// unauthorized, not_found, generation)}; NULL on OOM.
cJSON *srv_req_error_json(const SrvReq *r, int status, const char *message, const char *param);
// Replies with srv_error_json(...); param may be NULL.
enum MHD_Result srv_reply_error(SrvReq *r, int status, const char *message, const char *param);
// The same for a KG_E* code (status from srv_status_from_err; 429 adds Retry-After).
enum MHD_Result srv_reply_kg(SrvReq *r, int kg_code, const char *message, const char *param);
// KG_E* -> HTTP: EINVAL 400, ERANGE 422, EBUSY 429, ECANCEL/ENOMEM 503, others 500.
int srv_status_from_err(int kg_code);

// --- streaming and waiting on the engine ---
// Starts a text/event-stream reply whose bytes come from pull.
enum MHD_Result srv_stream_start(SrvReq *r, SrvPull pull);
// Suspends the request unless srv_wake() came since the last call; returns 1 if it
// suspended (the handler or reader then returns MHD_YES / 0). On a work pool thread it
// returns 1 at once: the request is suspended already and is resumed, to call r->resume,
// once the handler has returned.
int srv_wait(SrvReq *r);
// Resumes a request suspended by srv_wait (any thread; the engine's notify calls it).
void srv_wake(SrvReq *r);
// 1 when the client has closed its side (checked without reading).
int srv_client_gone(SrvReq *r);

// --- static files (static.c) ---
// Serves url from web_dir: 200 with Content-Type, or 404/403 as JSON. Never lists
// directories, never follows a path out of web_dir (.., %2e%2e, absolute, symlinks).
enum MHD_Result srv_static(SrvReq *r, const char *web_dir, const char *url);
// Resolves url under root into a malloc'd real path inside root; NULL when not allowed or
// absent (*status: 404 or 403). For tests.
char *srv_static_resolve(const char *root, const char *url, int *status);
const char *srv_mime_type(const char *path);

#endif
