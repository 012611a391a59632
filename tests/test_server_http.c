// test_server_http.c — kogpt2d's HTTP layer without the engine: JSON getters and UTF-8
// checks, static-file path resolution, metrics text, and a live MHD server on 127.0.0.1
// with this file's own route table (JSON echo, a suspended reply woken from another
// thread, an SSE stream fed by a timer thread, body limits, 404/405/415/401), and the same
// kinds of handler run on the work pool (SRV_ROUTE_WORK).
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "server/http/http.h"
#include "server/http/json_in.h"
#include "server/http/metrics.h"
#include "server/http/workpool.h"

// --- json_in ---

static void test_json(void) {
    char err[KG_ERRLEN];
    cJSON *j;
    static const char *const BAD[] = {"", "{", "{\"a\":1", "[1]", "\"s\"", "{} x", "nul"};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++)
        CHECK_MSG(json_parse_object(BAD[i], strlen(BAD[i]), &j, err) == KG_EINVAL, "%s", BAD[i]);
    const char nul[] = "{}\0{}";
    CHECK(json_parse_object(nul, sizeof nul - 1, &j, err) == KG_EINVAL);
    const char *ok = "{\"i\":5,\"f\":1.5,\"big\":1e300,\"s\":\"\xec\x95\x88\",\"b\":true,"
                     "\"n\":null,\"ids\":[1,2,3],\"bad\":[1,\"x\"],\"st\":[\"a\",\"b\"],"
                     "\"u\":\"\xff\"}";
    REQUIRE(json_parse_object(ok, strlen(ok), &j, err) == KG_OK, "%s", err);
    long long v;
    double d;
    int b;
    const char *s;
    size_t n;
    CHECK(json_int(j, "i", &v, 0, 1, 10, err) == KG_OK && v == 5);
    CHECK(json_int(j, "missing", &v, 7, 1, 10, err) == KG_OK && v == 7);
    CHECK(json_int(j, "n", &v, 7, 1, 10, err) == KG_OK && v == 7); // null: the default
    CHECK(json_int(j, "i", &v, 0, 6, 10, err) == KG_ERANGE && strstr(err, "i must be in 6..10"));
    CHECK(json_int(j, "f", &v, 0, 0, 10, err) == KG_EINVAL);
    CHECK(json_int(j, "big", &v, 0, 0, 10, err) == KG_ERANGE);
    CHECK(json_int(j, "s", &v, 0, 0, 10, err) == KG_EINVAL && strstr(err, "integer"));
    CHECK(json_num(j, "f", &d, 0, 0, 2, err) == KG_OK && d == 1.5);
    CHECK(json_num(j, "b", &d, 0, 0, 2, err) == KG_EINVAL);
    CHECK(json_bool(j, "b", &b, 0, err) == KG_OK && b == 1);
    CHECK(json_bool(j, "i", &b, 0, err) == KG_EINVAL);
    CHECK(json_str(j, "s", &s, &n, err) == KG_OK && n == 3);
    CHECK(json_str(j, "i", &s, &n, err) == KG_EINVAL);
    CHECK(json_str(j, "u", &s, &n, err) == KG_EINVAL && strstr(err, "UTF-8"));
    int *ids;
    CHECK(json_ids(cJSON_GetObjectItem(j, "ids"), "ids", &ids, &n, 0, 10, err) == KG_OK && n == 3 &&
          ids[2] == 3);
    free(ids);
    CHECK(json_ids(cJSON_GetObjectItem(j, "ids"), "ids", &ids, &n, 0, 2, err) == KG_ERANGE &&
          strstr(err, "ids[2]"));
    CHECK(json_ids(cJSON_GetObjectItem(j, "bad"), "bad", &ids, &n, 0, 2, err) == KG_EINVAL &&
          strstr(err, "bad[1]"));
    const char **list;
    CHECK(json_str_list(j, "st", &list, &n, 4, err) == KG_OK && n == 2 && !strcmp(list[1], "b"));
    free(list);
    CHECK(json_str_list(j, "s", &list, &n, 4, err) == KG_OK && n == 1);
    free(list);
    CHECK(json_str_list(j, "st", &list, &n, 1, err) == KG_ERANGE);
    CHECK(json_str_list(j, "i", &list, &n, 4, err) == KG_EINVAL);
    cJSON_Delete(j);

    static const struct {
        const char *s;
        int ok;
    } UTF8[] = {{"plain", 1},        {"\xea\xb0\x80", 1}, {"\xf0\x9f\x98\x80", 1}, {"\xc0\xaf", 0},
                {"\xe0\x80\xaf", 0}, {"\xed\xa0\x80", 0}, {"\xf4\x90\x80\x80", 0}, {"\xea\xb0", 0},
                {"\x80", 0},         {"\xfe", 0}};
    for (size_t i = 0; i < sizeof UTF8 / sizeof UTF8[0]; i++)
        CHECK_MSG(json_utf8_valid(UTF8[i].s, strlen(UTF8[i].s), NULL) == UTF8[i].ok, "case %zu", i);
}

// --- static files ---

static void test_static_resolve(const char *root) {
    int st;
    char *p = srv_static_resolve(root, "/", &st);
    CHECK(p && st == 200 && strstr(p, "index.html"));
    free(p);
    static const char *const BAD[] = {"/../secret",
                                      "/%2e%2e/secret",
                                      "/%252e%252e/secret",
                                      "/a/../../secret",
                                      "//etc/passwd",
                                      "/link/passwd",
                                      "/.hidden",
                                      "/sub/",
                                      "/sub",
                                      "/%00",
                                      "/%zz",
                                      "x"};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        p = srv_static_resolve(root, BAD[i], &st);
        CHECK_MSG(!p && (st == 404 || st == 403), "%s resolved to %s", BAD[i], p ? p : "");
        free(p);
    }
    CHECK(!strcmp(srv_mime_type("a/b.js"), "text/javascript; charset=utf-8"));
    CHECK(!strcmp(srv_mime_type("a.b/c"), "application/octet-stream"));
}

// --- metrics ---

static void test_metrics(void) {
    static const char *const EP[] = {"/v1/next-token", "/healthz"};
    static const char *const MODELS[] = {"a", "b\"c"}; // a name that must be escaped
    metrics_init(EP, 2, MODELS, 2);
    metrics_request("/v1/next-token", 200, 0.003);
    metrics_request("/v1/next-token", 200, 0.2);
    metrics_request("/v1/next-token", 422, 0.0001);
    metrics_request("/nope", 404, 0.0001);
    metrics_tokens("/v1/next-token", "a", 10, 4, 3, 20.0);
    metrics_tokens("/v1/next-token", "b\"c", 7, 0, 0, 0.0);
    metrics_first_token("a", 0.004);
    MetricsGauges g = {
        .engines = {{.model = "a", .queue_depth = 2}, {.model = "b\"c", .running = 3}},
        .n_engines = 2,
        .ready = 1};
    size_t len;
    char *t = metrics_render(&g, &len);
    REQUIRE(t != NULL, "render");
    CHECK(strlen(t) == len);
    CHECK(strstr(t, "kogpt2_requests_total{endpoint=\"/v1/next-token\",code=\"200\"} 2\n"));
    CHECK(strstr(t, "kogpt2_requests_total{endpoint=\"/v1/next-token\",code=\"422\"} 1\n"));
    CHECK(strstr(t, "kogpt2_requests_total{endpoint=\"other\",code=\"404\"} 1\n"));
    CHECK(strstr(t, "endpoint=\"/v1/next-token\",le=\"0.005\"} 2\n")); // cumulative
    CHECK(strstr(t, "endpoint=\"/v1/next-token\",le=\"+Inf\"} 3\n"));
    // per model (issue 36): each engine's counters and gauges under its name, never summed
    CHECK(strstr(t,
                 "kogpt2_cached_prompt_tokens_total{endpoint=\"/v1/next-token\",model=\"a\"} 4\n"));
    CHECK(strstr(t, "kogpt2_generated_tokens_total{endpoint=\"/v1/next-token\",model=\"a\"} 3\n"));
    CHECK(strstr(t, "kogpt2_prompt_tokens_total{endpoint=\"/v1/next-token\",model=\"a\"} 10\n"));
    CHECK(
        strstr(t, "kogpt2_prompt_tokens_total{endpoint=\"/v1/next-token\",model=\"b\\\"c\"} 7\n"));
    CHECK(strstr(t, "kogpt2_time_to_first_token_seconds_bucket{model=\"a\",le=\"0.005\"} 1\n"));
    CHECK(strstr(t, "kogpt2_time_to_first_token_seconds_count{model=\"b\\\"c\"} 0\n"));
    CHECK(strstr(t, "kogpt2_time_per_output_token_seconds_count{model=\"a\"} 1\n")); // 2 tokens
    CHECK(strstr(t, "kogpt2_time_per_output_token_seconds_bucket{model=\"a\",le=\"0.01\"} 1\n"));
    CHECK(strstr(t, "kogpt2_decode_seconds_total{model=\"a\"} 0.020000\n"));
    CHECK(strstr(t, "kogpt2_queue_depth{model=\"a\"} 2\n"));
    CHECK(strstr(t, "kogpt2_queue_depth{model=\"b\\\"c\"} 0\n"));
    CHECK(strstr(t, "kogpt2_running_jobs{model=\"b\\\"c\"} 3\n"));
    CHECK(strstr(t, "# TYPE process_resident_memory_bytes gauge\n"));
    CHECK(strstr(t, "\nprocess_open_fds "));
    free(t);
}

// --- a live server with this file's routes ---

typedef struct {
    SrvReq *r;
    int n_sent, n_ready, done;
    pthread_mutex_t mu;
} TickCtx;

// A stand-in for the engine: "produces" an event every 20 ms and wakes the request.
static void *tick_thread(void *arg) {
    TickCtx *t = arg;
    for (int i = 0; i < 5; i++) {
        usleep(20000);
        pthread_mutex_lock(&t->mu);
        t->n_ready++;
        pthread_mutex_unlock(&t->mu);
        srv_wake(t->r);
    }
    return NULL;
}

static ssize_t tick_pull(SrvReq *r, char *buf, size_t max) {
    TickCtx *t = r->ctx;
    pthread_mutex_lock(&t->mu);
    int ready = t->n_ready;
    pthread_mutex_unlock(&t->mu);
    if (t->n_sent == 5) return MHD_CONTENT_READER_END_OF_STREAM;
    if (t->n_sent == ready) return 0; // nothing new: suspended until tick_thread wakes us
    int n = snprintf(buf, max, "data: %d\n\n", t->n_sent++);
    return n;
}

static pthread_t tick_tid;

static void tick_done(SrvReq *r, int aborted) {
    (void)aborted;
    TickCtx *t = r->ctx;
    pthread_join(tick_tid, NULL);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static enum MHD_Result h_stream(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    TickCtx *t = calloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    t->r = r;
    r->ctx = t;
    r->done = tick_done;
    pthread_create(&tick_tid, NULL, tick_thread, t);
    return srv_stream_start(r, tick_pull);
}

static enum MHD_Result h_echo(SrvReq *r, const cJSON *j_req) {
    char err[KG_ERRLEN];
    long long v;
    int rc = json_int(j_req, "v", &v, 1, 1, 100, err);
    if (rc) return srv_reply_kg(r, rc, err, "v");
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "v", (double)v);
    return srv_reply_json(r, 200, j);
}

static void *wake_later(void *arg) {
    usleep(50000);
    srv_wake(arg);
    return NULL;
}

static pthread_t wake_tid;

static enum MHD_Result h_wait_resume(SrvReq *r) {
    pthread_join(wake_tid, NULL);
    return srv_reply_error(r, 429, "woken", NULL);
}

static enum MHD_Result h_wait(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    r->resume = h_wait_resume;
    pthread_create(&wake_tid, NULL, wake_later, r);
    if (srv_wait(r)) return MHD_YES;
    return h_wait_resume(r);
}

static enum MHD_Result h_ok(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    return srv_reply(r, 200, "text/plain", "ok", 2, NULL);
}

static const SrvRoute TEST_ROUTES[] = {
    {"POST", "/echo", h_echo, SRV_ROUTE_JSON},
    {"GET", "/stream", h_stream, 0},
    {"GET", "/wait", h_wait, 0},
    {"GET", "/open", h_ok, SRV_ROUTE_OPEN},
};

// The static files' directory for h_static (test_live sets it).
static const char *test_web_dir;

static enum MHD_Result h_static(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    return srv_static(r, test_web_dir, r->url);
}

// Sends req and returns the whole reply (connection closed by the request).
static char *http_raw(int port, const char *req, size_t req_len) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect");
    size_t off = 0;
    while (off < req_len) {
        ssize_t n = send(fd, req + off, req_len - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += (size_t)n;
    }
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    ssize_t n;
    while ((n = recv(fd, out + len, cap - len - 1, 0)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(fd);
    return out;
}

static char *http_req(int port, const char *method, const char *path, const char *headers,
                      const char *body) {
    char req[8192];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, headers, body ? strlen(body) : 0, body ? body : "");
    return http_raw(port, req, (size_t)n);
}

static int status_of(const char *reply) {
    return reply && strlen(reply) > 12 ? atoi(reply + 9) : 0;
}

static void test_live(const char *web) {
    SrvServer *srv;
    char err[KG_ERRLEN];
    SrvOptions o = {.host = "127.0.0.1",
                    .port = 0,
                    .threads = 2,
                    .timeout_s = 5,
                    .max_body = 256,
                    .api_keys = &(AuthKeys){(char *[]){"k"}, 1},
                    .routes = TEST_ROUTES,
                    .n_routes = sizeof TEST_ROUTES / sizeof TEST_ROUTES[0],
                    .fallback = h_static};
    test_web_dir = web;
    REQUIRE(srv_start(&srv, &o, err) == KG_OK, "%s", err);
    int port = srv_port(srv);
    const char *json = "Content-Type: application/json\r\nAuthorization: Bearer k\r\n";
    char *r;
    r = http_req(port, "POST", "/echo", json, "{\"v\": 7}");
    CHECK_MSG(status_of(r) == 200 && strstr(r, "{\"v\":7}") && strstr(r, "nosniff"), "%s", r);
    free(r);
    r = http_req(port, "POST", "/echo", json, "{\"v\": 700}");
    CHECK_MSG(status_of(r) == 422 && strstr(r, "\"param\":\"v\""), "%s", r);
    free(r);
    r = http_req(port, "POST", "/echo", json, "{\"v\": \"7\"}");
    CHECK_MSG(status_of(r) == 400, "%s", r);
    free(r);
    r = http_req(port, "POST", "/echo", json, "{\"v\": ");
    CHECK_MSG(status_of(r) == 400 && strstr(r, "malformed"), "%s", r);
    free(r);
    r = http_req(port, "POST", "/echo", "Content-Type: text/plain\r\nAuthorization: Bearer k\r\n",
                 "{}");
    CHECK_MSG(status_of(r) == 415, "%s", r);
    free(r);
    r = http_req(port, "POST", "/echo", "Content-Type: application/json\r\n", "{}");
    CHECK_MSG(status_of(r) == 401 && strstr(r, "WWW-Authenticate: Bearer"), "%s", r);
    free(r);
    r = http_req(port, "POST", "/echo",
                 "Content-Type: application/json\r\nAuthorization: Bearer kk\r\n", "{}");
    CHECK_MSG(status_of(r) == 401, "%s", r);
    free(r);
    r = http_req(port, "GET", "/open", "", NULL);
    CHECK_MSG(status_of(r) == 200, "%s", r);
    free(r);
    char big[1024];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[0] = '{', big[sizeof big - 2] = '}';
    r = http_req(port, "POST", "/echo", json, big);
    CHECK_MSG(status_of(r) == 413, "%s", r);
    free(r);
    const char chunked[] = "POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                           "Content-Type: application/json\r\nAuthorization: Bearer k\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n"
                           "c8\r\n{                                                                "
                           "                                                                    "
                           "                                                                   \r\n"
                           "c8\r\n                                                                 "
                           "                                                                    "
                           "                                                                  }\r\n"
                           "0\r\n\r\n"; // two chunks of 200 bytes (0xc8)
    r = http_raw(port, chunked, sizeof chunked - 1);
    CHECK_MSG(status_of(r) == 413, "chunked over the limit: %.80s", r);
    free(r);
    r = http_req(port, "GET", "/echo", json, NULL);
    CHECK_MSG(status_of(r) == 405 && strstr(r, "Allow: POST"), "%s", r);
    free(r);
    r = http_req(port, "GET", "/v1/none", json, NULL);
    CHECK_MSG(status_of(r) == 404 && strstr(r, "\"type\":\"invalid_request_error\""), "%s", r);
    free(r);
    r = http_req(port, "GET", "/", "", NULL);
    CHECK_MSG(status_of(r) == 200 && strstr(r, "Content-Security-Policy") && strstr(r, "<p>x</p>"),
              "%s", r);
    free(r);
    r = http_req(port, "GET", "/wait", json, NULL);
    CHECK_MSG(status_of(r) == 429 && strstr(r, "Retry-After") == NULL && strstr(r, "woken"), "%s",
              r);
    free(r);
    r = http_req(port, "GET", "/stream", json, NULL);
    CHECK_MSG(status_of(r) == 200 && strstr(r, "text/event-stream") && strstr(r, "data: 0\n\n") &&
                  strstr(r, "data: 4\n\n"),
              "%s", r);
    free(r);
    srv_drain(srv);
    CHECK(srv_draining(srv));
    srv_stop(srv);
}

// --- handlers on the work pool ---

// A gate the /slow handler waits at (on a work thread), as a megabyte to tokenize would.
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, entered;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void gate_set(int open) {
    pthread_mutex_lock(&gate.mu);
    gate.open = open;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
}

static enum MHD_Result h_slow(SrvReq *r, const cJSON *j_req) {
    pthread_mutex_lock(&gate.mu);
    gate.entered++;
    pthread_cond_broadcast(&gate.cv);
    while (!gate.open)
        pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
    return h_echo(r, j_req);
}

// Waits on the "engine" from a work thread: srv_wait returns 1 without suspending there, and
// the resume hook answers on MHD's thread once woken.
static enum MHD_Result h_work_wait(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    r->resume = h_wait_resume;
    pthread_create(&wake_tid, NULL, wake_later, r);
    if (srv_wait(r)) return MHD_YES;
    return h_wait_resume(r);
}

static const SrvRoute WORK_ROUTES[] = {
    {"POST", "/slow", h_slow, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/echo", h_echo, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/wait", h_work_wait, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"POST", "/stream", h_stream, SRV_ROUTE_JSON | SRV_ROUTE_WORK},
    {"GET", "/open", h_ok, SRV_ROUTE_OPEN},
};

typedef struct {
    int port;
    char *reply;
} SlowCall;

static void *slow_call(void *arg) {
    SlowCall *c = arg;
    c->reply =
        http_req(c->port, "POST", "/slow", "Content-Type: application/json\r\n", "{\"v\": 3}");
    return NULL;
}

static void *open_gate_later(void *arg) {
    (void)arg;
    usleep(100000);
    gate_set(1);
    return NULL;
}

// One MHD thread, one work thread, one request waiting: a third /slow gets 503 at once, and a
// GET is answered by the MHD thread while the work thread is stuck.
static void test_work_pool(void) {
    SrvServer *srv;
    char err[KG_ERRLEN];
    SrvOptions o = {.host = "127.0.0.1",
                    .threads = 1,
                    .timeout_s = 5,
                    .max_body = 256,
                    .work_threads = 1,
                    .max_work_queue = 1,
                    .routes = WORK_ROUTES,
                    .n_routes = sizeof WORK_ROUTES / sizeof WORK_ROUTES[0]};
    REQUIRE(srv_start(&srv, &o, err) == KG_OK, "%s", err);
    int port = srv_port(srv);
    const char *json = "Content-Type: application/json\r\n";
    SlowCall calls[2] = {{port, NULL}, {port, NULL}};
    pthread_t tids[2];
    gate_set(0);
    pthread_create(&tids[0], NULL, slow_call, &calls[0]);
    pthread_mutex_lock(&gate.mu);
    while (gate.entered < 1)
        pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
    pthread_create(&tids[1], NULL, slow_call, &calls[1]);
    SrvGauges g = {0};
    WAIT_UNTIL((srv_gauges(srv, &g), g.work_queued >= 1));
    CHECK_MSG(g.work_queued == 1 && g.work_running == 1, "queued %zu, running %zu", g.work_queued,
              g.work_running);
    char *r = http_req(port, "POST", "/slow", json, "{\"v\": 3}");
    CHECK_MSG(status_of(r) == 503 && strstr(r, "Retry-After: 1") && strstr(r, "work thread"), "%s",
              r);
    free(r);
    r = http_req(port, "GET", "/open", "", NULL); // the work thread is stuck in /slow
    CHECK_MSG(status_of(r) == 200, "%s", r);
    free(r);
    gate_set(1);
    for (int i = 0; i < 2; i++) {
        pthread_join(tids[i], NULL);
        CHECK_MSG(status_of(calls[i].reply) == 200 && strstr(calls[i].reply, "{\"v\":3}"), "%s",
                  calls[i].reply);
        free(calls[i].reply);
    }
    r = http_req(port, "POST", "/echo", json, "{\"v\": ");
    CHECK_MSG(status_of(r) == 400 && strstr(r, "malformed"), "parsed on the pool: %s", r);
    free(r);
    r = http_req(port, "POST", "/echo", json, "{\"v\": 700}");
    CHECK_MSG(status_of(r) == 422 && strstr(r, "\"param\":\"v\""), "%s", r);
    free(r);
    r = http_req(port, "POST", "/wait", json, "{}");
    CHECK_MSG(status_of(r) == 429 && strstr(r, "woken"), "waited from the pool: %s", r);
    free(r);
    r = http_req(port, "POST", "/stream", json, "{}");
    CHECK_MSG(status_of(r) == 200 && strstr(r, "data: 0\n\n") && strstr(r, "data: 4\n\n"),
              "streamed from the pool: %s", r);
    free(r);
    size_t len; // (test_metrics reset the counters)
    char *m = metrics_render(&(MetricsGauges){0}, &len);
    CHECK(m && strstr(m, "kogpt2_rejected_total{reason=\"work_queue\"} 1\n"));
    free(m);
    // stopping with a request on the work thread and one queued: the queued one is answered
    // 503 (cancelled), the running one finishes, and MHD stops with nothing suspended
    pthread_mutex_lock(&gate.mu);
    gate.open = gate.entered = 0;
    pthread_mutex_unlock(&gate.mu);
    pthread_create(&tids[0], NULL, slow_call, &calls[0]);
    pthread_mutex_lock(&gate.mu);
    while (gate.entered < 1)
        pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
    pthread_create(&tids[1], NULL, slow_call, &calls[1]);
    g.work_queued = 0;
    WAIT_UNTIL((srv_gauges(srv, &g), g.work_queued >= 1));
    pthread_t opener;
    pthread_create(&opener, NULL, open_gate_later, NULL);
    srv_drain(srv);
    srv_stop(srv);
    pthread_join(opener, NULL);
    for (int i = 0; i < 2; i++) {
        pthread_join(tids[i], NULL);
        free(calls[i].reply); // answered or closed: what matters is no hang and no leak
    }
}

// The work pool's idle hook (where kogpt2d gives memory back after a burst): it runs only
// when no call runs or waits, at least once after a burst, and not after every call of it.
static atomic_int idle_active, idle_calls, idle_bad;

static void idle_call(void *arg, int cancelled) {
    (void)arg;
    (void)cancelled;
    atomic_fetch_add(&idle_active, 1);
    usleep(2000);
    atomic_fetch_sub(&idle_active, 1);
}

static void idle_hook(void *ctx) {
    (void)ctx;
    if (atomic_load(&idle_active)) atomic_fetch_add(&idle_bad, 1); // a call was running
    atomic_fetch_add(&idle_calls, 1);
}

static void test_work_pool_idle(void) {
    WorkPool *p;
    char err[KG_ERRLEN];
    REQUIRE(workpool_start(&p, 2, 64, err) == KG_OK, "%s", err);
    workpool_on_idle(p, idle_hook, NULL);
    for (int i = 0; i < 40; i++)
        CHECK(workpool_submit(p, idle_call, NULL) == KG_OK);
    size_t queued, running;
    WAIT_UNTIL(
        (workpool_gauges(p, &queued, &running), !queued && !running && atomic_load(&idle_calls)));
    int after_burst = atomic_load(&idle_calls);
    CHECK(workpool_submit(p, idle_call, NULL) == KG_OK); // idle again after one more
    WAIT_UNTIL(atomic_load(&idle_calls) != after_burst);
    workpool_stop(p);
    CHECK_MSG(after_burst >= 1 && after_burst < 40 && atomic_load(&idle_calls) == after_burst + 1 &&
                  !atomic_load(&idle_bad),
              "idle hook: %d after a burst of 40, %d in all, %d while a call ran", after_burst,
              atomic_load(&idle_calls), atomic_load(&idle_bad));
}

int main(void) {
    char root[] = "/tmp/kg_http_XXXXXX";
    REQUIRE(mkdtemp(root), "mkdtemp");
    char path[512];
    snprintf(path, sizeof path, "%s/web", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/web/sub", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/web/index.html", root);
    FILE *f = fopen(path, "w");
    fputs("<p>x</p>", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/web/.hidden", root);
    fclose(fopen(path, "w"));
    snprintf(path, sizeof path, "%s/secret", root);
    fclose(fopen(path, "w"));
    snprintf(path, sizeof path, "%s/web/link", root);
    CHECK(symlink("/etc", path) == 0);
    snprintf(path, sizeof path, "%s/web", root);

    test_json();
    test_static_resolve(path);
    test_metrics();
    test_live(path);
    test_work_pool();
    test_work_pool_idle();
    return check_report();
}
