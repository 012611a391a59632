// http.c — the MHD glue: the access handler's three calls, the body reader, one reply
// helper, SSE streaming with suspend/resume, handlers on the work pool, the request log. The
// error bodies are http_error.c's; the open connections (admission, the request deadline)
// conns.c's.
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conns.h"
#include "json_in.h"
#include "log.h"
#include "metrics.h"
#include "workpool.h"

struct SrvServer {
    struct MHD_Daemon *d;
    SrvOptions opt;
    int port;
    atomic_int draining;
    atomic_size_t in_flight;
    WorkPool *pool;         // SRV_ROUTE_WORK handlers (NULL: they run on MHD's threads)
    atomic_int trim_owed;   // a large body was handled since the last malloc_trim
    MHD_socket quiesced_fd; // the listening socket once srv_drain took it from MHD
    ConnTable conns;        // open connections, their admission and request deadline
};

// --- replies ---

// Headers every reply carries: the request id, security, CORS, and Connection: close while
// draining.
static int srv_add_common_headers(SrvReq *r, struct MHD_Response *resp) {
    const SrvOptions *o = &r->srv->opt;
    int ok = MHD_add_response_header(resp, "X-Request-Id", r->request_id) == MHD_YES &&
             MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff") == MHD_YES &&
             MHD_add_response_header(resp, "X-Frame-Options", "DENY") == MHD_YES &&
             MHD_add_response_header(resp, "Referrer-Policy", "no-referrer") == MHD_YES;
    if (ok && o->cors_origin)
        ok = MHD_add_response_header(resp, "Access-Control-Allow-Origin", o->cors_origin) ==
                 MHD_YES &&
             MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                                     "Retry-After, X-Request-Id") == MHD_YES &&
             MHD_add_response_header(resp, "Vary", "Origin") == MHD_YES;
    if (ok && (atomic_load(&r->srv->draining) || (r->sc && r->sc->a.refused)))
        ok = MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close") == MHD_YES;
    return ok;
}

// Adds "Name", "value" pairs up to a NULL name.
static int srv_add_headers_va(struct MHD_Response *resp, va_list ap) {
    const char *name;
    while ((name = va_arg(ap, const char *))) {
        const char *value = va_arg(ap, const char *);
        if (MHD_add_response_header(resp, name, value) != MHD_YES) return 0;
    }
    return 1;
}

// Create, check, add headers, queue, destroy at once (MHD refcounts the response). On a work
// pool thread the response is held instead; MHD's thread queues it on resume (srv_work_end).
// whole: the reply is all there (not a stream), for admit_sweep.
static enum MHD_Result srv_queue(SrvReq *r, int status, struct MHD_Response *resp, size_t len,
                                 int whole) {
    if (!resp) return MHD_NO;
    enum MHD_Result ret = MHD_NO;
    int held = 0;
    if (srv_add_common_headers(r, resp)) {
        if (r->work.state != SRV_WORK_RUNNING) {
            ret = MHD_queue_response(r->conn, status, resp);
        } else if (!r->work.resp) { // (a second reply is refused, as MHD refuses it)
            r->work.resp = resp;
            r->work.status = status;
            ret = MHD_YES;
            held = 1;
        }
    }
    if (!held) MHD_destroy_response(resp);
    if (ret == MHD_YES) {
        r->status = status;
        r->bytes_out = len;
        conns_arm(&r->srv->conns, r->sc, 0);
        if (whole) conns_answered(&r->srv->conns, r->sc);
    }
    return ret;
}

enum MHD_Result srv_reply(SrvReq *r, int status, const char *type, const char *body, size_t len,
                          ...) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    va_list ap;
    va_start(ap, len);
    int ok = MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type) == MHD_YES &&
             srv_add_headers_va(resp, ap);
    va_end(ap);
    if (!ok) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    return srv_queue(r, status, resp, len, 1);
}

// As srv_reply_json with one optional extra header (name may be NULL).
static enum MHD_Result srv_reply_json_h(SrvReq *r, int status, cJSON *j_root, const char *name,
                                        const char *value) {
    char *text = j_root ? cJSON_PrintUnformatted(j_root) : NULL;
    cJSON_Delete(j_root);
    if (!text) {
        static const char OOM[] = "{\"error\":{\"code\":503,\"type\":\"server_error\","
                                  "\"message\":\"out of memory\",\"param\":null}}";
        return srv_reply(r, 503, SRV_TYPE_JSON, OOM, sizeof OOM - 1, "Cache-Control", "no-store",
                         NULL);
    }
    enum MHD_Result ret = srv_reply(r, status, SRV_TYPE_JSON, text, strlen(text), "Cache-Control",
                                    "no-store", name, value, NULL);
    cJSON_free(text);
    return ret;
}

enum MHD_Result srv_reply_json(SrvReq *r, int status, cJSON *j_root) {
    return srv_reply_json_h(r, status, j_root, NULL, NULL);
}

// An error reply with one extra header (Allow, Retry-After, WWW-Authenticate).
static enum MHD_Result srv_reply_error_h(SrvReq *r, int status, const char *message,
                                         const char *param, const char *name, const char *value) {
    return srv_reply_json_h(r, status, srv_req_error_json(r, status, message, param), name, value);
}

enum MHD_Result srv_reply_error(SrvReq *r, int status, const char *message, const char *param) {
    return srv_reply_error_h(r, status, message, param, NULL, NULL);
}

enum MHD_Result srv_reply_kg(SrvReq *r, int kg_code, const char *message, const char *param) {
    int status = srv_status_from_err(kg_code);
    if (status == MHD_HTTP_TOO_MANY_REQUESTS)
        return srv_reply_error_h(r, status, message, param, "Retry-After", "1");
    return srv_reply_error(r, status, message, param);
}

// --- waiting on the engine ---

int srv_wait(SrvReq *r) {
    int suspended = 1;
    pthread_mutex_lock(&r->mu);
    if (r->work.state != SRV_WORK_RUNNING) { // (on the work pool: suspended already)
        if (!r->woken) {
            r->suspended = 1;
            MHD_suspend_connection(r->conn);
        } else {
            suspended = 0;
        }
        r->woken = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return suspended;
}

void srv_wake(SrvReq *r) {
    pthread_mutex_lock(&r->mu);
    r->woken = 1;
    if (r->suspended && r->work.state != SRV_WORK_RUNNING) { // the pool resumes it when done
        r->suspended = 0;
        MHD_resume_connection(r->conn);
    }
    pthread_mutex_unlock(&r->mu);
}

// A read of 0 bytes is not a hang-up: a client that half-closes after its request
// (shutdown(SHUT_WR): nc -N, scripts, some proxies) still reads the answer. Only an error on
// the socket (a reset: the peer closed and our last write was refused) means it is gone.
int srv_client_gone(SrvReq *r) {
    MHD_socket fd = r->sc ? r->sc->fd : MHD_INVALID_SOCKET; // (no MHD call: any thread)
    if (fd == MHD_INVALID_SOCKET) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci) return 0;
        fd = ci->connect_fd;
    }
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// --- handlers on the work pool ---

// Parses the body and runs the route's handler (a work thread, or MHD's without a pool).
static enum MHD_Result srv_run_handler(SrvReq *r) {
    char err[KG_ERRLEN];
    cJSON *j_req;
    int rc = json_parse_object(r->body.p ? r->body.p : "", r->body.len, &j_req, err);
    if (rc) return srv_reply_kg(r, rc, err, NULL);
    enum MHD_Result ret = r->route->handler(r, j_req);
    cJSON_Delete(j_req);
    return ret;
}

// A work thread: the handler (or, the pool stopping, a 503), then MHD may have it back. A
// large body owes a malloc_trim once the pool is idle (srv_pool_idle).
static void srv_work_run(void *arg, int cancelled) {
    SrvReq *r = arg;
    enum MHD_Result ret = cancelled ? srv_reply_error(r, 503, "the server is shutting down", NULL)
                                    : srv_run_handler(r);
    if (r->body.len >= SRV_TRIM_AFTER_BODY) atomic_store(&r->srv->trim_owed, 1);
    pthread_mutex_lock(&r->mu);
    r->work.ret = ret;
    r->work.state = SRV_WORK_DONE;
    r->suspended = 0; // srv_work_start suspended it, and srv_wake left it so meanwhile
    MHD_resume_connection(r->conn);
    pthread_mutex_unlock(&r->mu);
}

// The work pool fell idle (workpool_on_idle). After a large body the memory its parsing and
// encoding took goes back to the system: the many small blocks of a tokenizer's lattice
// (SentencePiece: ~70 bytes per byte of text) stay in the work thread's malloc arena once
// freed, and glibc returns an arena's pages only from its top (four 1 MiB /v1/tokenize bodies
// left idle RSS +390 MB); malloc_trim releases every free page. Once per burst, when idle:
// it walks every arena (tens of ms after a burst), which after each request would slow the
// next one.
static void srv_pool_idle(void *ctx) {
    SrvServer *s = ctx;
    if (atomic_exchange(&s->trim_owed, 0)) malloc_trim(0);
}

// MHD's thread: queues the request's handler on the pool and suspends it until it has run;
// a full pool is a 503 at once.
static enum MHD_Result srv_work_start(SrvReq *r) {
    pthread_mutex_lock(&r->mu); // srv_work_run takes it to resume: only once suspended here
    r->work.state = SRV_WORK_RUNNING;
    int rc = workpool_submit(r->srv->pool, srv_work_run, r);
    if (rc == KG_OK) {
        r->suspended = 1;
        MHD_suspend_connection(r->conn);
    } else {
        r->work.state = SRV_WORK_NONE;
    }
    pthread_mutex_unlock(&r->mu);
    if (rc == KG_OK) return MHD_YES;
    if (rc != KG_EBUSY) return srv_reply_error(r, 503, "the server is shutting down", NULL);
    metrics_reject(METRICS_REJ_WORK_QUEUE, 1);
    char msg[128];
    snprintf(msg, sizeof msg, "busy: %u requests are waiting for a work thread; retry later",
             r->srv->opt.max_work_queue);
    return srv_reply_error_h(r, 503, msg, NULL, "Retry-After", "1");
}

// MHD's thread, once the handler has run: queues its reply, or goes on as it asked (waiting
// on the engine: r->resume), or closes (it returned MHD_NO).
static enum MHD_Result srv_work_end(SrvReq *r) {
    if (r->work.resp) {
        enum MHD_Result ret = MHD_queue_response(r->conn, r->work.status, r->work.resp);
        MHD_destroy_response(r->work.resp);
        r->work.resp = NULL;
        if (ret != MHD_YES) return MHD_NO;
    }
    if (r->work.ret != MHD_YES) return MHD_NO;
    if (r->status) return MHD_YES;
    return r->resume ? r->resume(r) : MHD_YES;
}

// --- streaming ---

static ssize_t srv_stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    SrvReq *r = cls;
    for (;;) {
        ssize_t n = r->pull(r, buf, max);
        if (n > 0) r->bytes_out += (size_t)n;
        if (n < 0) conns_answered(&r->srv->conns, r->sc); // the end: only bytes to send are left
        if (n != 0) return n;
        if (srv_client_gone(r)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (srv_wait(r)) return 0; // suspended: MHD calls again after srv_wake()
    }
}

enum MHD_Result srv_stream_start(SrvReq *r, SrvPull pull) {
    r->pull = pull;
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, SRV_STREAM_BLOCK, srv_stream_reader, r, NULL);
    if (!resp) return MHD_NO;
    if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, SRV_TYPE_SSE) != MHD_YES ||
        MHD_add_response_header(resp, "Cache-Control", "no-cache") != MHD_YES ||
        MHD_add_response_header(resp, "X-Accel-Buffering", "no") != MHD_YES) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    enum MHD_Result ret = srv_queue(r, MHD_HTTP_OK, resp, 0, 0);
    r->bytes_out = 0;
    return ret;
}

// --- the access handler ---

// Appends one chunk of the body; over max_body it stops keeping bytes (still drained).
// Returns 0, or -1 when the body is so far over the limit that the connection should close.
static int srv_body_feed(SrvReq *r, const char *data, size_t n) {
    if (r->body_state == SRV_BODY_OK && n > r->srv->opt.max_body - r->body.len)
        r->body_state = SRV_BODY_TOO_LARGE;
    if (r->body_state != SRV_BODY_OK) { // we already know the answer: drop the rest
        r->dropped += n;
        return r->dropped > SRV_LINGER_BYTES ? -1 : 0;
    }
    if (buf_append(&r->body, data, n)) r->body_state = SRV_BODY_NO_MEMORY; // answered 503
    return 0;
}

// The route for url, or NULL; *path_known says whether another method has it.
static int srv_route_matches(const SrvRoute *route, const char *url) {
    if (!(route->flags & SRV_ROUTE_PREFIX)) return !strcmp(route->path, url);
    size_t n = strlen(route->path);
    return !strncmp(route->path, url, n) && url[n]; // the prefix and something after it
}

static const SrvRoute *srv_route_lookup(const SrvServer *s, const char *method, const char *url,
                                        int *path_known) {
    const char *m = strcmp(method, "HEAD") ? method : "GET";
    *path_known = 0;
    for (size_t i = 0; i < s->opt.n_routes; i++) {
        const SrvRoute *route = &s->opt.routes[i];
        if (!srv_route_matches(route, url)) continue;
        if (!strcmp(route->method, m)) return route;
        if (!strcmp(m, "GET") && (route->flags & SRV_ROUTE_GET_FALLBACK)) continue;
        *path_known = 1;
    }
    return NULL;
}

// The methods url answers to, for the Allow header.
static void srv_allow(const SrvServer *s, const char *url, char *out, size_t cap) {
    out[0] = '\0';
    for (size_t i = 0; i < s->opt.n_routes; i++)
        if (srv_route_matches(&s->opt.routes[i], url)) {
            if (out[0]) strncat(out, ", ", cap - strlen(out) - 1);
            strncat(out, s->opt.routes[i].method, cap - strlen(out) - 1);
        }
    if (strstr(out, "GET")) strncat(out, ", HEAD", cap - strlen(out) - 1);
}

// The request's key, "Authorization: Bearer KEY" (OpenAI's clients) or "x-api-key: KEY"
// (Anthropic's), matched against the keys in constant time (auth.h).
static int srv_auth_ok(SrvReq *r) {
    const char *h =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h && !strncasecmp(h, "Bearer ", 7) && auth_match(r->srv->opt.api_keys, h + 7)) return 1;
    h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "x-api-key");
    return auth_match(r->srv->opt.api_keys, h);
}

// Content-Type must be application/json (parameters such as charset allowed) or absent.
static int srv_json_type_ok(SrvReq *r) {
    const char *t =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!t) return 1;
    while (*t == ' ')
        t++;
    size_t n = strlen("application/json");
    return !strncasecmp(t, "application/json", n) && (t[n] == '\0' || t[n] == ';' || t[n] == ' ');
}

// A header-name list as a preflight sends it: tokens, commas and spaces, bounded; anything
// else is not echoed back.
static int srv_header_list_ok(const char *list) {
    size_t n = strlen(list);
    return n < 1024 && strspn(list, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789!#$%&'*+-.^_`|~, ") == n;
}

// OPTIONS: a CORS preflight when --cors-origin is set.
static enum MHD_Result srv_preflight(SrvReq *r) {
    if (!r->srv->opt.cors_origin)
        return srv_reply_error(r, 405, "OPTIONS is only answered with --cors-origin", NULL);
    // the headers the browser asks for, whatever they are: SDKs send their own (the OpenAI
    // SDK's x-stainless-*), and the origin is the trust boundary, not the header names
    const char *asked =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    return srv_reply(r, 204, SRV_TYPE_TEXT, "", 0, "Access-Control-Allow-Methods",
                     "GET, POST, OPTIONS", "Access-Control-Allow-Headers",
                     asked && srv_header_list_ok(asked) ? asked : "Content-Type, Authorization",
                     "Access-Control-Max-Age", "600", NULL);
}

// The last call: every check in order, then the route's handler.
static enum MHD_Result srv_dispatch(SrvReq *r, const char *url) {
    if (!strcmp(r->method, "OPTIONS")) return srv_preflight(r);
    int path_known;
    const SrvRoute *route = srv_route_lookup(r->srv, r->method, url, &path_known);
    if (!route) {
        int is_get = !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD");
        if (path_known || (!is_get && strncmp(url, "/v1/", 4))) {
            char allow[64];
            srv_allow(r->srv, url, allow, sizeof allow);
            char msg[128];
            snprintf(msg, sizeof msg, "%s is not allowed here", r->method);
            return srv_reply_error_h(r, 405, msg, NULL, "Allow", allow[0] ? allow : "GET, HEAD");
        }
        if (is_get && strncmp(url, "/v1/", 4) && r->srv->opt.fallback) {
            r->endpoint = "static";
            return r->srv->opt.fallback(r, NULL);
        }
        return srv_reply_error(r, 404, "no such endpoint", NULL);
    }
    r->route = route;
    r->endpoint = route->path;
    const AuthKeys *keys = r->srv->opt.api_keys;
    if (keys && keys->n && !(route->flags & SRV_ROUTE_OPEN) && !srv_auth_ok(r))
        return srv_reply_error_h(r, 401,
                                 "missing or wrong API key (Authorization: Bearer KEY, or "
                                 "x-api-key: KEY)",
                                 NULL, "WWW-Authenticate", "Bearer");
    if (r->body_state == SRV_BODY_TOO_LARGE) {
        char msg[96];
        snprintf(msg, sizeof msg, "body is over the limit of %zu bytes", r->srv->opt.max_body);
        return srv_reply_error(r, 413, msg, NULL);
    }
    if (r->body_state == SRV_BODY_NO_MEMORY) return srv_reply_error(r, 503, "out of memory", NULL);
    if (!(route->flags & SRV_ROUTE_JSON)) return route->handler(r, NULL);
    if (!srv_json_type_ok(r))
        return srv_reply_error(r, 415, "Content-Type must be application/json", NULL);
    if ((route->flags & SRV_ROUTE_WORK) && r->srv->pool) return srv_work_start(r);
    return srv_run_handler(r);
}

// MHD_get_connection_values' iterator: counts Content-Length headers into *cls, up to 2.
static enum MHD_Result srv_count_content_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                                const char *value) {
    (void)kind;
    (void)value;
    int *seen = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) return MHD_YES;
    *seen += 1;
    return *seen > 1 ? MHD_NO : MHD_YES;
}

// The request's id (SrvReq.request_id): the client's X-Request-Id when it is one, else 16
// random bytes in hex (a counter and the clock if the kernel has no randomness to give).
static void srv_request_id(SrvReq *r) {
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
    size_t n = h ? strnlen(h, SRV_REQUEST_ID_MAX + 1) : 0;
    int ok = n >= 1 && n <= SRV_REQUEST_ID_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = h[i] > 0x20 && h[i] < 0x7f; // visible ASCII: safe in a header and a log line
    if (ok) {
        memcpy(r->request_id, h, n + 1);
        return;
    }
    static atomic_ullong counter;
    uint64_t x[2];
    if (getrandom(x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x) {
        x[0] = (uint64_t)(r->t_start * 1e9);
        x[1] = (atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull) ^ (uint64_t)time(NULL);
    }
    snprintf(r->request_id, sizeof r->request_id, "%016llx%016llx", (unsigned long long)x[0],
             (unsigned long long)x[1]);
}

// The first call: state only, except that a connection over max_connections (503), a
// second Content-Length (400) or a body announced far over the limit (413) is refused at
// once (MHD then skips the upload and closes the connection).
static enum MHD_Result srv_req_begin(SrvServer *s, struct MHD_Connection *conn, const char *url,
                                     const char *method, void **req_cls) {
    SrvReq *r = calloc(1, sizeof *r);
    if (!r) return MHD_NO;
    r->conn = conn;
    r->url = url;
    r->srv = s;
    r->t_start = kg_now_s();
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    srv_request_id(r); // before any reply: the refusals below carry it too
    pthread_mutex_init(&r->mu, NULL);
    atomic_fetch_add(&s->in_flight, 1);
    *req_cls = r;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->sc = ci ? ci->socket_context : NULL;
    if (r->sc && r->sc->a.refused) { // Connection: close too (srv_add_common_headers)
        int per_ip = r->sc->a.refused == ADMIT_REFUSED_PER_IP;
        char msg[128];
        if (per_ip)
            snprintf(msg, sizeof msg,
                     "too many connections from your address (limit %u); retry later",
                     s->opt.max_connections_per_ip);
        else
            snprintf(msg, sizeof msg, "too many connections (limit %u); retry later",
                     s->opt.max_connections);
        metrics_reject(per_ip ? METRICS_REJ_PER_IP : METRICS_REJ_MAX_CONNECTIONS, 1);
        return srv_reply_error_h(r, 503, msg, NULL, "Retry-After", "1");
    }
    // One Content-Length only: MHD reads the first, and a proxy in front may have framed the
    // body by another (request smuggling). MHD itself refuses a malformed value, a
    // Transfer-Encoding other than chunked, and both headers together (discipline level 1).
    int n_content_length = 0;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, srv_count_content_length, &n_content_length);
    if (n_content_length > 1)
        return srv_reply_error(r, 400, "more than one Content-Length header", NULL);
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0; // MHD checked the digits
    if (n > s->opt.max_body + SRV_LINGER_BYTES) {
        char msg[96];
        snprintf(msg, sizeof msg, "body is over the limit of %zu bytes", s->opt.max_body);
        return srv_reply_error(r, 413, msg, NULL); // answered before the body: MHD closes
    }
    // A body over the limit but within SRV_LINGER_BYTES of it is read and dropped
    // (srv_body_feed), then answered 413: clients that send the whole body before reading
    // (Python's http.client, requests, httpx) would see a broken pipe instead of the answer
    // if the connection closed under them. nginx's lingering close does the same.
    return MHD_YES;
}

static enum MHD_Result srv_access(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls) {
    (void)version;
    SrvReq *r = *req_cls;
    if (!r) return srv_req_begin(cls, conn, url, method, req_cls);           // 1st call: state only
    if (*upload_data_size) {                                                 // middle calls: body
        if (srv_body_feed(r, upload_data, *upload_data_size)) return MHD_NO; // close
        *upload_data_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&r->mu);
    int worked = r->work.state == SRV_WORK_DONE;
    if (worked) r->work.state = SRV_WORK_NONE; // (srv_wake reads it on the engine's thread)
    pthread_mutex_unlock(&r->mu);
    if (worked) return srv_work_end(r);  // resumed: its handler ran on the work pool
    if (r->status) return MHD_YES;       // answered already (early 413 or 503)
    if (r->resume) return r->resume(r);  // woken up while waiting on the engine
    conns_arm(&r->srv->conns, r->sc, 0); // the whole request is here: no deadline now
    return srv_dispatch(r, url);         // last call: answer
}

// Writes the request's line to the request log (log.h).
static void srv_log_request(SrvReq *r, int status, double dt, int aborted) {
    if (!r->srv->opt.log) return;
    char addr[INET6_ADDRSTRLEN] = "-";
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, sizeof addr);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, addr, sizeof addr);
    }
    log_access(&(LogAccess){.method = r->method,
                            .path = r->path,
                            .addr = addr,
                            .request_id = r->request_id,
                            .status = status,
                            .bytes = r->bytes_out,
                            .ms = dt * 1e3,
                            .aborted = aborted});
}

// The completion callback: runs on every path (answered, hung up, timed out, shutdown).
static void srv_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                          enum MHD_RequestTerminationCode toe) {
    (void)conn;
    SrvServer *s = cls;
    SrvReq *r = *req_cls;
    if (!r) return;
    int aborted = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
    if (r->done) r->done(r, aborted); // releases the engine sequence: no srv_wake() after this
    double dt = kg_now_s() - r->t_start;
    int status = r->status ? r->status : 499; // 499: the client closed before the answer
    metrics_request(r->endpoint, status, dt);
    srv_log_request(r, status, dt, aborted);
    conns_arm(&s->conns, r->sc, 1); // the next request on this connection has its own deadline
    if (r->work.resp) MHD_destroy_response(r->work.resp); // held when the daemon stopped
    // a thread that resumed r (a work thread ending its handler, srv_wake) may still be
    // unlocking r->mu after the resume let MHD complete it: wait it out before the destroy
    pthread_mutex_lock(&r->mu);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_destroy(&r->mu);
    buf_free(&r->body);
    free(r);
    *req_cls = NULL;
    atomic_fetch_sub(&s->in_flight, 1);
}

// MHD's own messages (protocol errors, failed sends) go through the same logger, as warnings.
static void srv_mhd_log(void *cls, const char *fmt, va_list ap) {
    SrvServer *s = cls;
    if (!s->opt.log) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = '\0';
    log_msg(LOG_WARN, "libmicrohttpd: %s", line);
}

// MHD's URL unescaping, except that a URL holding %00 stays as it came: decoded, the NUL
// would cut the path short ("/index.html%00.js" would serve index.html); kept, the literal
// "%00" matches no route and no file (404).
static size_t srv_unescape(void *cls, struct MHD_Connection *conn, char *uri) {
    (void)cls;
    (void)conn;
    return strstr(uri, "%00") ? strlen(uri) : MHD_http_unescape(uri);
}

// --- the server ---

static void srv_free(SrvServer *s) {
    conns_free(&s->conns);
    free(s);
}

// The listening socket, made here rather than by MHD so that a bind error is named exactly.
// SO_REUSEADDR lets a restart bind while old connections linger in TIME_WAIT; never
// SO_REUSEPORT, which let a second daemon bind the same port and take part of the traffic.
static int srv_listen(const struct addrinfo *ai, char *err) {
    char host[INET6_ADDRSTRLEN] = "*", port[8] = "";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), on = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN)) {
        int e = errno;
        if (fd >= 0) close(fd);
        kg_err(err, KG_EIO, "listen on %s:%s: %s", host, port,
               e == EADDRINUSE ? "address already in use" : strerror(e));
        return -1;
    }
    return fd;
}

int srv_start(SrvServer **out, const SrvOptions *opt, char *err) {
    *out = NULL;
    // Built against >= 1.0 (CMake checks), but Debian 12's 0.9.75 has the same soname: if it
    // is the one loaded, its request framing faults (see scripts/build_mhd.sh) are back.
    if (!strncmp(MHD_get_version(), "0.", 2))
        return kg_err(err, KG_EINVAL,
                      "libmicrohttpd %s was loaded; kogpt2d needs 1.0 or later "
                      "(scripts/build_mhd.sh builds it into /usr/local)",
                      MHD_get_version());
    SrvServer *s = calloc(1, sizeof *s);
    if (!s) return kg_err(err, KG_ENOMEM, "server: out of memory");
    s->opt = *opt;
    s->quiesced_fd = MHD_INVALID_SOCKET;
    if (!s->opt.max_body) s->opt.max_body = SRV_MAX_BODY;
    if (!s->opt.max_connections) s->opt.max_connections = SRV_MAX_CONNECTIONS;
    conns_init(&s->conns, s->opt.max_connections, s->opt.max_connections_per_ip,
               s->opt.request_timeout_s, s->opt.log);
    char port[16];
    snprintf(port, sizeof port, "%d", opt->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *ai = NULL;
    const char *host = opt->host && opt->host[0] ? opt->host : NULL;
    int grc = getaddrinfo(host, port, &hints, &ai);
    if (grc) {
        srv_free(s);
        return kg_err(err, KG_EINVAL, "--host %s: %s", host ? host : "", gai_strerror(grc));
    }
    int fd = srv_listen(ai, err);
    freeaddrinfo(ai);
    if (fd < 0) {
        srv_free(s);
        return KG_EIO;
    }
    if (s->opt.work_threads &&
        workpool_start(&s->pool, s->opt.work_threads, s->opt.max_work_queue, err)) {
        close(fd);
        srv_free(s);
        return KG_ENOMEM;
    }
    if (s->pool) workpool_on_idle(s->pool, srv_pool_idle, s);
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    // MHD's limit is above twice ours: admitted and refused connections (admit.h) fit, with
    // room for the refusals beyond their bound while every refused one is being answered;
    // past it, new ones wait in the listen backlog.
    unsigned threads = opt->threads ? opt->threads : 4;
    s->d = MHD_start_daemon(
        flags, 0, NULL, NULL, srv_access, s, MHD_OPTION_EXTERNAL_LOGGER, srv_mhd_log, s,
        MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, 2 * s->opt.max_connections + 16 * threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)opt->timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
        srv_completed, s, MHD_OPTION_UNESCAPE_CALLBACK, srv_unescape, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, conns_notify, &s->conns, MHD_OPTION_CLIENT_DISCIPLINE_LVL, 1,
        MHD_OPTION_END); // level 1: "suitable for highly loaded public servers"
    if (!s->d) {
        close(fd);
        workpool_stop(s->pool);
        srv_free(s);
        return kg_err(err, KG_EIO, "could not start the HTTP server");
    }
    if (conns_watch(&s->conns, err)) { // (refused ones have a deadline too)
        MHD_stop_daemon(s->d);
        workpool_stop(s->pool);
        srv_free(s);
        return KG_ENOMEM;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : opt->port;
    *out = s;
    return KG_OK;
}

int srv_port(const SrvServer *s) { return s->port; }
void *srv_app(const SrvServer *s) { return s->opt.app; }
int srv_draining(const SrvServer *s) { return atomic_load(&s->draining); }
size_t srv_in_flight(const SrvServer *s) { return atomic_load(&s->in_flight); }

void srv_gauges(SrvServer *s, SrvGauges *g) {
    *g = (SrvGauges){0};
    conns_counts(&s->conns, &g->admitted, &g->refused);
    if (s->pool) workpool_gauges(s->pool, &g->work_queued, &g->work_running);
}

void srv_drain(SrvServer *s) {
    if (atomic_exchange(&s->draining, 1)) return;
    // No new connections from here on. MHD's threads may still touch the listening socket
    // (one at its connection limit adds it back to its epoll set), so it is closed only after
    // MHD_stop_daemon, as MHD says; shut down now, it refuses connections at once.
    s->quiesced_fd = MHD_quiesce_daemon(s->d);
    if (s->quiesced_fd != MHD_INVALID_SOCKET) shutdown(s->quiesced_fd, SHUT_RDWR);
}

void srv_stop(SrvServer *s) {
    if (!s) return;
    // every request on the pool resumed first (MHD must not stop with one suspended); those
    // still queued answer 503
    workpool_stop(s->pool);
    MHD_stop_daemon(s->d); // CLOSED for every connection: the list is empty after this
    if (s->quiesced_fd != MHD_INVALID_SOCKET) close(s->quiesced_fd);
    srv_free(s); // (the watchdog stopped there)
}
