// bench_clients — one load generator for kogpt2d and for llama.cpp's llama-server (issue 34
// item 7): N concurrent keep-alive clients against a server already running on 127.0.0.1, each
// sending requests back to back for a fixed time, then one line of figures:
//   generate    streamed completions, the same body to both servers at OpenAI's
//               /v1/completions: a prompt of random token ids, max_tokens, ignore_eos, the same
//               sampling (temperature 1, top_k 40, top_p 0.95, min_p 0). Generated tokens/s, time
//               to the first token and the gaps between tokens (p50, p99).
//   next-token  the 10 most probable next tokens of a cold prompt (kogpt2d: /v1/next-token
//               top_k 10; llama-server: /completion n_predict 1 n_probs 10). Requests/s and
//               latency (p50, p99).
// With --pid, the server's peak RSS during the run (/proc/PID/status VmRSS every 100 ms), and
// at the end a wait until the server is idle again (its CPU time, /proc/PID/stat), so that the
// requests cut at the deadline do not run on into the next measurement.
// Figures only: nothing passes or fails. bench/bench_vs_llama_server.sh runs it.
//
//   build/bench_clients --port P --api kogpt2|llama --mode generate|next-token --clients N
//                       [--seconds 20] [--prompt-tokens 32] [--max-tokens 128] [--vocab 51200]
//                       [--pid PID] [--label TEXT]
//   build/bench_clients --write-model DIR [--shape base|tiny]
//                       (a random f32 GPT-2, KoGPT2-base's shape or 2 x 64, with the shared v2
//                       tokenizer from $KG_SHARED_DIR, default ../shared)
//
// Each client's prompts and seeds are the same for both servers (seeded by client and request
// number), every prompt new (no prefix is shared). At the deadline the requests still in flight
// are cut (their connections closed): tokens/s counts what arrived before it. A streamed event
// is one token, except where a server held back the bytes of an incomplete UTF-8 character and
// sent two tokens at once; a finished request's count comes from its usage (completion_tokens).
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

#include "bench_daemon.h"
#include "bench_http.h"
#include "bench_util.h"

typedef struct {
    int port, llama, generate;
    size_t prompt_tokens, max_tokens, vocab;
} Load;

// One growable list of seconds.
typedef struct {
    double *v;
    size_t n, cap;
} Times;

static void times_add(Times *t, double x) {
    char err[KG_ERRLEN];
    if (KG_GROW(t->v, &t->cap, t->n + 1, err)) return; // the sample dropped, the run goes on
    t->v[t->n++] = x;
}

#define REPLY_CAP (1 << 16) // a next-token reply's bytes kept (10 candidates fit many times)

typedef struct {
    const Load *load;
    int id;
    double deadline;
    BenchConn conn;
    // live_fd: conn.fd while open, for the main thread to cut at the deadline (the fd number
    // may be reused once closed: a cut then hits another client's connection, which is being
    // cut anyway); cut: the deadline passed, stop; ended: the thread is done
    atomic_int live_fd, cut, ended;
    // results
    size_t requests, done, errors, tokens;
    Times ttft, gaps, latency;
    char first_error[256]; // what the first failed request got, for stderr
    // the stream being read: its lines, and its first bytes (an error's body)
    double sent, last;
    size_t events, usage;
    BenchSse sse;
    char head[160];
    size_t head_len;
} Client;

// One "data: ..." line of a stream: a token event (a choice with text), the usage, or the end.
static void client_event(void *arg, const char *data) {
    Client *cl = arg;
    double t = kg_now_s();
    const char *usage = strstr(data, "\"completion_tokens\":");
    if (usage) cl->usage = strtoul(usage + 20, NULL, 10);
    const char *text = strstr(data, "\"text\":\"");
    if (!text || text[8] == '"' || t > cl->deadline) return; // no text, or after the deadline
    if (cl->events == 0)
        times_add(&cl->ttft, t - cl->sent);
    else
        times_add(&cl->gaps, t - cl->last);
    cl->last = t;
    cl->events++;
}

// The stream's bytes: its first kept, then split into lines, each "data:" line handled.
static void client_stream(void *arg, const char *data, size_t n) {
    Client *cl = arg;
    size_t k = n < sizeof cl->head - 1 - cl->head_len ? n : sizeof cl->head - 1 - cl->head_len;
    memcpy(cl->head + cl->head_len, data, k);
    cl->head[cl->head_len += k] = '\0';
    bench_sse_data(&cl->sse, data, n);
}

// Request k's body for client id: a new prompt of random ids, a seed of its own.
static void request_body(const Load *ld, int id, size_t k, char *body, size_t cap) {
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)(id + 1) << 32) ^ (uint64_t)(k + 1);
    int o;
    if (ld->generate || !ld->llama)
        o = snprintf(body, cap, "{\"%s\":[", ld->generate ? "prompt" : "tokens");
    else
        o = snprintf(body, cap, "{\"prompt\":[");
    for (size_t i = 0; i < ld->prompt_tokens && (size_t)o < cap; i++)
        o += snprintf(body + o, cap - (size_t)o, "%s%llu", i ? "," : "",
                      (unsigned long long)(10 + bench_rand(&rng) % (ld->vocab - 10)));
    if ((size_t)o >= cap) return;
    if (ld->generate)
        snprintf(body + o, cap - (size_t)o,
                 "],\"max_tokens\":%zu,\"temperature\":1,\"top_k\":40,\"top_p\":0.95,"
                 "\"min_p\":0,\"seed\":%zu,\"ignore_eos\":true,\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true}}",
                 ld->max_tokens, (size_t)id * 100000 + k);
    else if (ld->llama)
        snprintf(body + o, cap - (size_t)o, "],\"n_predict\":1,\"n_probs\":10}");
    else
        snprintf(body + o, cap - (size_t)o, "],\"top_k\":10}");
}

static void client_close(Client *cl) {
    atomic_store(&cl->live_fd, -1);
    bench_conn_close(&cl->conn);
}

// Opens the client's connection; 0 or -1.
static int client_connect(Client *cl) {
    int rc = bench_conn_open(&cl->conn, cl->load->port);
    atomic_store(&cl->live_fd, cl->conn.fd);
    if (rc) client_close(cl);
    return rc;
}

// One attempt at a request on the open connection: the status, -1 when the connection broke,
// -2 when a next-token reply holds no candidates. The stream's events are counted as they come.
static int client_send(Client *cl, const char *path, const char *body, char *reply) {
    const Load *ld = cl->load;
    cl->sent = kg_now_s();
    cl->events = cl->usage = cl->sse.len = cl->head_len = 0;
    cl->head[0] = reply[0] = '\0';
    if (ld->generate)
        return bench_http_send(&cl->conn, path, body)
                   ? -1
                   : bench_http_read(&cl->conn, client_stream, cl);
    int status = bench_http_request(&cl->conn, path, body, reply, REPLY_CAP);
    // llama-server leaves completion_probabilities out when its one token is an incomplete
    // UTF-8 byte (a byte token: 256 of the vocabulary); it did the work all the same
    const char *want = ld->llama ? "\"tokens_predicted\":1" : "\"candidates\":[{";
    return status == 200 && !strstr(reply, want) ? -2 : status;
}

static void *client_main(void *arg) {
    Client *cl = arg;
    const Load *ld = cl->load;
    size_t cap = 16 * ld->prompt_tokens + 512;
    char *body = malloc(cap), *reply = malloc(REPLY_CAP);
    const char *path = ld->generate ? "/v1/completions"
                       : ld->llama  ? "/completion"
                                    : "/v1/next-token";
    while (body && reply && !atomic_load(&cl->cut) && kg_now_s() < cl->deadline) {
        request_body(ld, cl->id, cl->requests++, body, cap);
        // a kept-alive connection that the server has closed since (llama-server closes it
        // after every stream) fails at once with nothing received: the request goes once more
        // on a new connection, as HTTP clients do with a stale pooled one (not an error)
        int status = -1;
        for (int attempt = 0; attempt < 2; attempt++) {
            int reused = cl->conn.fd >= 0;
            if (!reused && client_connect(cl)) {
                usleep(10000); // the server refused: not too fast a loop
                break;
            }
            status = client_send(cl, path, body, reply);
            if (status != -1 || !reused || cl->head_len || reply[0]) break;
            client_close(cl);
        }
        double t = kg_now_s();
        if (ld->generate) // what arrived before the deadline, finished or cut
            cl->tokens += status == 200 && cl->usage && t <= cl->deadline ? cl->usage : cl->events;
        if (status == 200 && t <= cl->deadline) {
            cl->done++;
            if (!ld->generate) times_add(&cl->latency, t - cl->sent);
        } else if (!atomic_load(&cl->cut) && t <= cl->deadline) {
            if (!cl->errors++)
                snprintf(cl->first_error, sizeof cl->first_error, "%s %d: %.200s",
                         status == -1   ? "the connection broke"
                         : status == -2 ? "no answer in the reply"
                                        : "HTTP",
                         status, ld->generate ? cl->head : reply);
        }
        if (status == -1 || cl->conn.fd < 0) client_close(cl); // broken, or closed by the reply
    }
    client_close(cl);
    free(body);
    free(reply);
    atomic_store(&cl->ended, 1);
    return NULL;
}

// Percentile p (0..1) of the sorted t, in milliseconds; 0 for none.
static double pct_ms(const Times *t, double p) { return 1e3 * bench_pct(t->v, t->n, p); }

// All clients' samples of one kind (the Times at byte offset field of a Client) in one sorted
// list; the clients' own lists are freed.
static Times merged(Client *cl, int n, size_t field) {
    Times all = {0};
    for (int i = 0; i < n; i++) {
        Times *t = (Times *)((char *)&cl[i] + field);
        for (size_t k = 0; k < t->n; k++)
            times_add(&all, t->v[k]);
        free(t->v);
    }
    if (all.n) qsort(all.v, all.n, sizeof *all.v, bench_cmp_double);
    return all;
}

// Waits until pid is idle (under 2 % of a core over half a second: the requests cut at the
// deadline are cancelled), at most max_s. The seconds waited.
static double settle(int pid, double max_s) {
    double t0 = kg_now_s(), cpu = bench_cpu_seconds(pid);
    while (cpu >= 0 && kg_now_s() - t0 < max_s) {
        usleep(500000);
        double now = bench_cpu_seconds(pid);
        if (now - cpu < 0.01) break;
        cpu = now;
    }
    return kg_now_s() - t0;
}

static int run(const Load *ld, int clients, double seconds, int pid, const char *label) {
    Client *cl = calloc((size_t)clients, sizeof *cl);
    pthread_t *tid = calloc((size_t)clients, sizeof *tid);
    if (!cl || !tid) return 1;
    double t0 = kg_now_s(), rss_peak = pid ? bench_rss_bytes(pid) / 1048576 : -1;
    for (int i = 0; i < clients; i++) {
        cl[i].load = ld; // the rest is zero (calloc)
        cl[i].id = i;
        cl[i].deadline = t0 + seconds;
        cl[i].conn.fd = -1;
        cl[i].sse = (BenchSse){.on_event = client_event, .arg = &cl[i]};
        atomic_init(&cl[i].live_fd, -1);
        if (pthread_create(&tid[i], NULL, client_main, &cl[i])) return 1;
    }
    while (kg_now_s() < t0 + seconds) { // the server's memory while the load runs
        usleep(100000);
        double r = pid ? bench_rss_bytes(pid) / 1048576 : -1; // MiB
        rss_peak = r > rss_peak ? r : rss_peak;
    }
    // cut what is still in flight, again until every client is done (one may have been
    // opening a connection at the first cut)
    for (int i = 0; i < clients; i++)
        atomic_store(&cl[i].cut, 1);
    for (int busy = 1; busy; usleep(20000)) {
        busy = 0;
        for (int i = 0; i < clients; i++) {
            if (atomic_load(&cl[i].ended)) continue;
            busy = 1;
            int fd = atomic_load(&cl[i].live_fd);
            if (fd >= 0) shutdown(fd, SHUT_RDWR);
        }
    }
    size_t requests = 0, done = 0, errors = 0, tokens = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(tid[i], NULL);
        if (cl[i].first_error[0] && !errors)
            fprintf(stderr, "bench_clients: %s: first error: %s\n", label, cl[i].first_error);
        done += cl[i].done;
        errors += cl[i].errors;
        tokens += cl[i].tokens;
        requests += cl[i].requests;
    }
    Times ttft = merged(cl, clients, offsetof(Client, ttft));
    Times gaps = merged(cl, clients, offsetof(Client, gaps));
    Times lat = merged(cl, clients, offsetof(Client, latency));
    double settled = pid ? settle(pid, 120) : 0; // before the next run, on either server
    printf("%s api=%s mode=%s clients=%d seconds=%.0f", label, ld->llama ? "llama" : "kogpt2",
           ld->generate ? "generate" : "next-token", clients, seconds);
    if (ld->generate)
        printf(" tok_s=%.1f ttft_p50_ms=%.1f ttft_p99_ms=%.1f itl_p50_ms=%.2f itl_p99_ms=%.2f "
               "tokens=%zu",
               (double)tokens / seconds, pct_ms(&ttft, 0.5), pct_ms(&ttft, 0.99),
               pct_ms(&gaps, 0.5), pct_ms(&gaps, 0.99), tokens);
    else
        printf(" req_s=%.1f lat_p50_ms=%.2f lat_p99_ms=%.2f", (double)done / seconds,
               pct_ms(&lat, 0.5), pct_ms(&lat, 0.99));
    printf(" requests=%zu done=%zu errors=%zu settle_s=%.1f rss_peak_mib=%.0f\n", requests, done,
           errors, settled, rss_peak);
    fflush(stdout);
    free(ttft.v);
    free(gaps.v);
    free(lat.v);
    free(cl);
    free(tid);
    return 0;
}

// A random f32 model of the shape with the shared v2 tokenizer, in dir (made here); 0 or 1.
static int write_model(const char *dir, const char *shape) {
    if (mkdir(dir, 0755)) {
        fprintf(stderr, "bench_clients: cannot make %s: %s\n", dir, strerror(errno));
        return 1;
    }
    return bench_model_write(dir, shape) ? 1 : 0;
}

int main(int argc, char **argv) {
    Load ld = {.prompt_tokens = 32, .max_tokens = 128, .vocab = 51200};
    const char *api = NULL, *mode = NULL, *label = "", *model_dir = NULL, *shape = "base";
    double seconds = 20;
    int clients = 0, pid = 0, o;
    static const struct option OPTS[] = {{"port", required_argument, NULL, 'P'},
                                         {"api", required_argument, NULL, 'a'},
                                         {"mode", required_argument, NULL, 'm'},
                                         {"clients", required_argument, NULL, 'c'},
                                         {"seconds", required_argument, NULL, 's'},
                                         {"prompt-tokens", required_argument, NULL, 'n'},
                                         {"max-tokens", required_argument, NULL, 'g'},
                                         {"vocab", required_argument, NULL, 'v'},
                                         {"pid", required_argument, NULL, 'p'},
                                         {"label", required_argument, NULL, 'l'},
                                         {"write-model", required_argument, NULL, 'w'},
                                         {"shape", required_argument, NULL, 'S'},
                                         {NULL, 0, NULL, 0}};
    while ((o = getopt_long(argc, argv, "", OPTS, NULL)) != -1) {
        switch (o) {
        case 'P':
            ld.port = atoi(optarg);
            break;
        case 'a':
            api = optarg;
            break;
        case 'm':
            mode = optarg;
            break;
        case 'c':
            clients = atoi(optarg);
            break;
        case 's':
            seconds = atof(optarg);
            break;
        case 'n':
            ld.prompt_tokens = strtoul(optarg, NULL, 10);
            break;
        case 'g':
            ld.max_tokens = strtoul(optarg, NULL, 10);
            break;
        case 'v':
            ld.vocab = strtoul(optarg, NULL, 10);
            break;
        case 'p':
            pid = atoi(optarg);
            break;
        case 'l':
            label = optarg;
            break;
        case 'w':
            model_dir = optarg;
            break;
        case 'S':
            shape = optarg;
            break;
        default:
            return 2;
        }
    }
    if (model_dir) return write_model(model_dir, shape);
    ld.llama = api && !strcmp(api, "llama");
    ld.generate = mode && !strcmp(mode, "generate");
    if (!api || (!ld.llama && strcmp(api, "kogpt2")) || !mode ||
        (!ld.generate && strcmp(mode, "next-token")) || ld.port <= 0 || clients < 1 ||
        clients > 1024 || seconds <= 0 || ld.prompt_tokens < 1 || ld.prompt_tokens > 4096 ||
        ld.vocab <= 10 || ld.max_tokens < 1) {
        fprintf(stderr, "usage: see the header of bench/bench_clients.c\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    return run(&ld, clients, seconds, pid, label);
}
