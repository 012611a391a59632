// bench_server.c — kogpt2d under load: next-token requests/s with p50/p99 latency at 1, 8
// and 32 concurrent keep-alive clients; the Explorer's click latency with and without the
// prefix cache; generation throughput one at a time vs batched. Prints figures only.
//
//   build/bench_server [--model DIR] [--shape tiny|base] [--seconds S] [--threads N]
//                      [--pause-ms MS]   (between clicks; default 300, a user's pause)
//                      [--dtype D[,D...]] (kogpt2d --dtype: f32, f16, bf16, q8_0, q4_0)
//
// Without --model it writes a random model (tiny: 2 layers x 64; base: KoGPT2-base's
// 12 x 768, f32) with the shared v2 tokenizer ($KG_SHARED_DIR, default ../shared) into a
// temporary directory, and starts kogpt2d from beside this binary on 127.0.0.1. With a
// list of dtypes every figure is measured once per dtype, one after the other in one run
// (issue 16: `--shape base --dtype f32,q8_0,q4_0`); without, the weights stay as stored.
#define _GNU_SOURCE // mkdtemp, usleep
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>

#include "bench_daemon.h"
#include "bench_http.h"
#include "bench_util.h"

// --- load ---

typedef struct {
    int port, id;
    double until;
    size_t n_prompt, vocab;
    double *lat; // latencies (s)
    size_t n, cap;
    size_t errors;
} Client;

// A cold prompt each time: n_prompt random ids, so no prefix is shared between requests.
static void *client_main(void *arg) {
    Client *cl = arg;
    BenchConn *c = malloc(sizeof *c);
    bench_conn_open(c, cl->port);
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(cl->id + 1);
    char body[8192];
    while (kg_now_s() < cl->until && cl->n < cl->cap) {
        // as the Explorer asks: with speculation (the daemon may have it turned off)
        int o = snprintf(body, sizeof body, "{\"top_k\":10,\"speculate\":true,\"tokens\":[");
        for (size_t i = 0; i < cl->n_prompt; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            o += snprintf(body + o, sizeof body - (size_t)o, "%s%llu", i ? "," : "",
                          (unsigned long long)(10 + rng % (cl->vocab - 10)));
        }
        snprintf(body + o, sizeof body - (size_t)o, "]}");
        double t0 = kg_now_s();
        int st = bench_http_request(c, "/v1/next-token", body, NULL, 0);
        if (st != 200) {
            cl->errors++;
            bench_conn_close(c);
            bench_conn_open(c, cl->port);
            continue;
        }
        cl->lat[cl->n++] = kg_now_s() - t0;
    }
    bench_conn_close(c);
    free(c);
    return NULL;
}

static void bench_next_token(int port, int clients, double seconds, size_t n_prompt, size_t vocab) {
    Client *cl = calloc((size_t)clients, sizeof *cl);
    pthread_t *tid = calloc((size_t)clients, sizeof *tid);
    double t0 = kg_now_s();
    for (int i = 0; i < clients; i++) {
        cl[i] = (Client){.port = port,
                         .id = i,
                         .until = t0 + seconds,
                         .n_prompt = n_prompt,
                         .vocab = vocab,
                         .cap = 1 << 20};
        cl[i].lat = malloc(cl[i].cap * sizeof(double));
        pthread_create(&tid[i], NULL, client_main, &cl[i]);
    }
    size_t total = 0, errors = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(tid[i], NULL);
        total += cl[i].n;
        errors += cl[i].errors;
    }
    double dt = kg_now_s() - t0;
    double *all = malloc((total ? total : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < clients; i++) {
        memcpy(all + k, cl[i].lat, cl[i].n * sizeof(double));
        k += cl[i].n;
        free(cl[i].lat);
    }
    qsort(all, total, sizeof *all, bench_cmp_double);
    printf("next-token  %2d clients  %8.1f req/s  p50 %7.2f ms  p99 %7.2f ms  (%zu requests, "
           "%zu errors, %zu-token cold prompts)\n",
           clients, (double)total / dt, 1e3 * bench_pct(all, total, 0.5),
           1e3 * bench_pct(all, total, 0.99), total, errors, n_prompt);
    free(all);
    free(cl);
    free(tid);
}

// The Explorer's session: a 20-token prompt, then clicks that append the best candidate.
static int pause_ms = 300; // a user's pause between clicks (--pause-ms)

static void bench_clicks(int port, const char *label, size_t vocab) {
    BenchConn c;
    bench_conn_open(&c, port);
    char body[16384], out[1 << 16];
    int ids[128];
    size_t n = 0;
    for (; n < 20; n++)
        ids[n] = (int)(100 + (n * 7919) % (vocab - 100));
    double lat[40], server[40];
    int clicks = 0;
    for (int k = 0; k < 41 && n < 128; k++) {
        // as the Explorer asks: with speculation (the daemon may have it turned off)
        int o = snprintf(body, sizeof body, "{\"top_k\":10,\"speculate\":true,\"tokens\":[");
        for (size_t i = 0; i < n; i++)
            o += snprintf(body + o, sizeof body - (size_t)o, "%s%d", i ? "," : "", ids[i]);
        snprintf(body + o, sizeof body - (size_t)o, "]}");
        double t0 = kg_now_s();
        if (bench_http_request(&c, "/v1/next-token", body, out, sizeof out) != 200) break;
        double dt = kg_now_s() - t0;
        const char *cand = strstr(out, "\"candidates\":[{\"id\":");
        const char *tot = strstr(out, "\"total_ms\":");
        if (!cand || !tot) break;
        if (k > 0) { // k == 0 is the first (cold) prompt, not a click
            lat[clicks] = dt;
            server[clicks++] = atof(tot + 11) * 1e-3;
        }
        usleep((useconds_t)pause_ms * 1000); // lets the engine precompute likely clicks
        ids[n++] = atoi(cand + 20);
    }
    bench_conn_close(&c);
    qsort(lat, (size_t)clicks, sizeof *lat, bench_cmp_double);
    qsort(server, (size_t)clicks, sizeof *server, bench_cmp_double);
    printf("click %-28s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms client; server p50 %6.2f ms "
           "(%d clicks)\n",
           label, 1e3 * bench_pct(lat, (size_t)clicks, 0.5),
           1e3 * bench_pct(lat, (size_t)clicks, 0.9), 1e3 * bench_pct(lat, (size_t)clicks, 0.99),
           1e3 * bench_pct(server, (size_t)clicks, 0.5), clicks);
}

typedef struct {
    int port, tokens;
} GenArg;

static void *gen_main(void *arg) {
    GenArg *g = arg;
    BenchConn c;
    bench_conn_open(&c, g->port);
    char body[256];
    snprintf(body, sizeof body,
             "{\"tokens\":[%d,%d,%d],\"max_tokens\":%d,\"ignore_eos\":true,\"seed\":%d}",
             100 + g->port % 7, 200, 300, g->tokens, g->port);
    bench_http_request(&c, "/v1/generate", body, NULL, 0);
    bench_conn_close(&c);
    return NULL;
}

static void bench_generate(int port, int clients, int tokens) {
    pthread_t tid[64];
    GenArg a = {port, tokens};
    double t0 = kg_now_s();
    for (int i = 0; i < clients; i++)
        pthread_create(&tid[i], NULL, gen_main, &a);
    for (int i = 0; i < clients; i++)
        pthread_join(tid[i], NULL);
    double dt = kg_now_s() - t0;
    printf("generate    %2d clients  %8.1f tokens/s  (%d x %d tokens in %.2f s)\n", clients,
           clients * tokens / dt, clients, tokens, dt);
}

// Every figure against one kogpt2d configuration (dtype NULL: as stored), restarting it for
// the clicks without speculation and without the prefix cache.
// kogpt2d with dtype (NULL: as stored) and up to two more arguments (NULL: none).
static pid_t daemon_start(const char *exe, const char *model, int port, int threads,
                          const char *dtype, const char *extra1, const char *extra2) {
    const char *extra[5] = {NULL};
    size_t n = 0;
    if (dtype) {
        extra[n++] = "--dtype";
        extra[n++] = dtype;
    }
    if (extra1) extra[n++] = extra1;
    if (extra2) extra[n++] = extra2;
    return bench_daemon_start(exe, model, port, threads, extra);
}

static void bench_daemon(const char *exe, const char *model, int port, int threads,
                         const char *dtype, double seconds) {
    pid_t pid = daemon_start(exe, model, port, threads, dtype, NULL, NULL);
    const size_t vocab = 51200;
    for (int clients = 1; clients <= 32; clients *= clients == 1 ? 8 : 4)
        bench_next_token(port, clients, seconds, 20, vocab);
    bench_clicks(port, "(prefix cache + speculation)", vocab);
    bench_generate(port, 1, 32);
    bench_generate(port, 8, 32);
    bench_daemon_stop(pid);
    pid = daemon_start(exe, model, port, threads, dtype, "--no-speculate", NULL);
    bench_clicks(port, "(prefix cache only)", vocab);
    bench_daemon_stop(pid);
    pid = daemon_start(exe, model, port, threads, dtype, "--cache-mb", "0");
    bench_clicks(port, "(no prefix cache)", vocab);
    bench_daemon_stop(pid);
}

int main(int argc, char **argv) {
    const char *model = NULL, *shape = "tiny";
    char dtypes[256] = "";
    double seconds = 5;
    int threads = 0;
    static const struct option OPTS[] = {{"model", required_argument, NULL, 'm'},
                                         {"shape", required_argument, NULL, 's'},
                                         {"seconds", required_argument, NULL, 'S'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"pause-ms", required_argument, NULL, 'p'},
                                         {"dtype", required_argument, NULL, 'd'},
                                         {NULL, 0, NULL, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", OPTS, NULL)) != -1) {
        if (o == 'm')
            model = optarg;
        else if (o == 's')
            shape = optarg;
        else if (o == 'S')
            seconds = atof(optarg);
        else if (o == 't')
            threads = atoi(optarg);
        else if (o == 'p')
            pause_ms = atoi(optarg);
        else if (o == 'd')
            snprintf(dtypes, sizeof dtypes, "%s", optarg);
        else
            return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    char exe[PATH_MAX], self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return 1;
    self[len] = '\0';
    snprintf(exe, sizeof exe, "%s/kogpt2d", dirname(self));
    char dir[] = "/tmp/kg_bench_srv_XXXXXX";
    if (!model) {
        if (!mkdtemp(dir) || bench_model_write(dir, shape)) return 1;
        model = dir;
    }
    int port = bench_free_port();
    char *save, *dtype = dtypes[0] ? strtok_r(dtypes, ",", &save) : NULL;
    do {
        if (dtype) printf("--dtype %s\n", dtype);
        bench_daemon(exe, model, port, threads, dtype, seconds);
    } while (dtype && (dtype = strtok_r(NULL, ",", &save)));
    return 0;
}
