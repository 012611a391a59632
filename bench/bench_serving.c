// bench_serving.c — kogpt2d serving streams: what each stream sees between its tokens, and what
// the daemon holds. Prints figures only (never pass/fail).
//
//   build/bench_serving [--kogpt2d PATH] [--model DIR] [--shape tiny|base] [--threads N]
//                       [--seconds S] [--scenario NAME[,NAME...]] [--label L]
//                       [--max-tokens N] [--prompt N] [-- FLAGS...]
//
// Scenarios (default: all), each against a fresh kogpt2d (PATH, default the one beside this
// binary, so that another build's daemon can be measured in turns with this one; FLAGS after
// `--` go to it):
//   streams   closed-loop streaming /v1/generate clients at 16, 32, 64 (--max-tokens, 64, per
//             request, 20-token random prompts) for S seconds each: generated tokens/s, TTFT p50,
//             the streams' inter-token gaps p50/p99, the share of gaps over 3x the median, and how
//             many of those coincide with a stream's KV growth (the old engine doubled a
//             sequence's cache at 2^k * 16 positions; the paged one takes a block every 16)
//   prefill   16 streams generating; every 8 s a --prompt (512) token prompt arrives
//             (/v1/generate, one token): the streams' gaps while it is in, p99 against their
//             median
//   memory    32 streams of --prompt-token random prompts generating 124 tokens each (--prompt
//             900: to ~1,024 positions): peak RSS against the idle RSS and /metrics' KV blocks in
//             use x block bytes, and against the blocks held (in use + cached: the pool hands
//             out a freed block before an untouched one, so their peak is every block whose
//             pages were ever written)
//   shared    32 streams whose prompts share a 400-token system prompt (then 16 tokens of
//             their own): /metrics' KV blocks used and the table entries naming them, at peak
//   threads   32 streams; each thread's CPU time over S seconds, as a share of the wall time
//             (/proc/PID/task/*/stat), by thread name
//
// Every scenario prints one `result` line of name=value pairs (grep-able across rounds).
#define _GNU_SOURCE // mkdtemp, usleep
#include <ctype.h>
#include <dirent.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>

#include "bench_daemon.h"
#include "bench_http.h"
#include "bench_util.h"

#define MAX_CLIENTS   64
#define MAX_GAPS      (1 << 18)
#define VOCAB         51200
#define SYSTEM_TOKENS 400

static const char *g_label = "";
static size_t g_max_tokens = 64; // --max-tokens: per streaming request
static size_t g_prompt = 512;    // --prompt: the long prompt (prefill), every prompt (memory)
static size_t g_vocab = 51200;   // the served model's (/v1/models): prompts draw ids below it

// --- one streaming client ---

typedef struct {
    int port, id;
    double until;    // stop starting requests after this (0: one request)
    size_t n_prompt; // random prompt tokens
    size_t n_shared; // of them, the first n_shared are the shared system prompt
    size_t max_tokens;
    uint64_t rng;
    // results
    size_t tokens, requests, errors;
    double *gap, *gap_end; // (n_gaps) seconds between two tokens of a request, and when
    size_t *gap_pos;       // the position (prompt + generated before it) the later one fed
    size_t n_gaps;
    double *ttft;
    size_t n_ttft;
} Stream;

static void random_prompt(char *body, size_t cap, Stream *s) {
    int o = snprintf(body, cap,
                     "{\"max_tokens\":%zu,\"ignore_eos\":true,\"stream\":true,"
                     "\"seed\":%d,\"tokens\":[",
                     s->max_tokens, s->id);
    uint64_t shared = 0x5eed;
    for (size_t i = 0; i < s->n_prompt; i++) {
        uint64_t *r = i < s->n_shared ? &shared : &s->rng;
        *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
        o += snprintf(body + o, cap - (size_t)o, "%s%llu", i ? "," : "",
                      (unsigned long long)(10 + *r % (g_vocab - 10)));
    }
    snprintf(body + o, cap - (size_t)o, "]}");
}

// The stream being read: when it was sent, its last token's time, its token events so far.
typedef struct {
    Stream *s;
    double t0, last;
    size_t n;
} StreamRead;

// One event of a /v1/generate stream, timed as it arrives: a token ({"id":...}), or the
// final event ({"done":true,...}), which is not a token.
static void stream_event(void *arg, const char *data) {
    StreamRead *r = arg;
    Stream *s = r->s;
    if (strncmp(data, "{\"id\":", 6)) return;
    double t = kg_now_s();
    if (r->n == 0 && s->n_ttft < MAX_GAPS) s->ttft[s->n_ttft++] = t - r->t0;
    if (r->n > 0 && s->n_gaps < MAX_GAPS) {
        s->gap[s->n_gaps] = t - r->last;
        s->gap_end[s->n_gaps] = t;
        s->gap_pos[s->n_gaps++] = s->n_prompt + r->n - 1;
    }
    r->last = t;
    r->n++;
}

// One streaming request on c: the time of every token event, read as it arrives.
static void stream_request(Stream *s, BenchConn *c, const char *body) {
    StreamRead r = {.s = s, .t0 = kg_now_s()};
    BenchSse sse = {.on_event = stream_event, .arg = &r};
    if (bench_http_send(c, "/v1/generate", body) ||
        bench_http_read(c, bench_sse_data, &sse) != 200) {
        s->errors++;
        return;
    }
    s->tokens += r.n;
    s->requests++;
}

static void *stream_main(void *arg) {
    Stream *s = arg;
    BenchConn *c = malloc(sizeof *c);
    char *body = malloc(16384);
    bench_conn_open(c, s->port);
    do {
        size_t errors = s->errors;
        random_prompt(body, 16384, s);
        stream_request(s, c, body);
        if (s->errors != errors || c->fd < 0) { // a fresh connection after a failure
            bench_conn_close(c);
            bench_conn_open(c, s->port);
        }
    } while (kg_now_s() < s->until);
    bench_conn_close(c);
    free(c);
    free(body);
    return NULL;
}

static void streams_new(Stream *st, int n, int port, double until, size_t n_prompt, size_t n_shared,
                        size_t max_tokens) {
    for (int i = 0; i < n; i++) {
        st[i] = (Stream){.port = port,
                         .id = i,
                         .until = until,
                         .n_prompt = n_prompt,
                         .n_shared = n_shared,
                         .max_tokens = max_tokens,
                         .rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)};
        st[i].gap = malloc(MAX_GAPS * sizeof(double));
        st[i].gap_end = malloc(MAX_GAPS * sizeof(double));
        st[i].gap_pos = malloc(MAX_GAPS * sizeof(size_t));
        st[i].ttft = malloc(MAX_GAPS * sizeof(double));
    }
}

static void streams_free(Stream *st, int n) {
    for (int i = 0; i < n; i++) {
        free(st[i].gap);
        free(st[i].gap_end);
        free(st[i].gap_pos);
        free(st[i].ttft);
    }
}

static void streams_run(Stream *st, int n, pthread_t *tid) {
    for (int i = 0; i < n; i++)
        pthread_create(&tid[i], NULL, stream_main, &st[i]);
}

static void streams_join(pthread_t *tid, int n) {
    for (int i = 0; i < n; i++)
        pthread_join(tid[i], NULL);
}

#define ALL_GAPS ((size_t)MAX_CLIENTS * MAX_GAPS / 16) // g_all's room

// Every gap of every stream (ending in [from, to]) sorted into out (ALL_GAPS); how many.
static size_t gaps_collect(const Stream *st, int n, double from, double to, double *out) {
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (size_t g = 0; g < st[i].n_gaps && k < ALL_GAPS; g++)
            if (st[i].gap_end[g] >= from && st[i].gap_end[g] <= to) out[k++] = st[i].gap[g];
    qsort(out, k, sizeof *out, bench_cmp_double);
    return k;
}

// 1 when a sequence at position pos (a token fed there) needed more KV: the old engine grew a
// sequence's buffer when pos reached its capacity (the prompt's length rounded up to 16, then
// doubled); the paged engine takes a block at every multiple of 16.
static int grows_at(size_t pos, size_t n_prompt, int paged) {
    if (paged) return pos % 16 == 0;
    size_t cap = (n_prompt + 15) / 16 * 16;
    while (cap < pos)
        cap *= 2;
    return pos == cap;
}

// --- the daemon's side ---

// The value of metric `name` in /metrics summed over its series (one per model: kogpt2d labels
// them model="..."), only those whose labels hold `label` when it is not NULL
// (`state="used"`); -1 when there is none.
static double metric(int port, const char *name, const char *label) {
    static char out[1 << 16];
    BenchConn c;
    double v = -1;
    if (bench_conn_open(&c, port) == 0 &&
        bench_http_request(&c, "/metrics", NULL, out, sizeof out) == 200) {
        size_t nl = strlen(name);
        for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
            if (strncmp(p, name, nl) || (p[nl] != ' ' && p[nl] != '{')) continue;
            const char *end = strchr(p + nl, ' '), *eol = strchr(p, '\n');
            if (!end || (eol && end > eol)) continue;
            if (label) {
                const char *hit = strstr(p + nl, label);
                if (!hit || hit > end) continue;
            }
            v = (v < 0 ? 0 : v) + atof(end + 1);
        }
    }
    bench_conn_close(&c);
    return v;
}

// A KV block's bytes as the daemon reports them: its pool's bytes over its blocks (/metrics);
// 0 for a daemon without a paged cache.
static double block_bytes(int port) {
    double blocks = metric(port, "kogpt2_kv_blocks", "state=\"used\"") +
                    metric(port, "kogpt2_kv_blocks", "state=\"cached\"") +
                    metric(port, "kogpt2_kv_blocks", "state=\"free\"");
    double bytes = metric(port, "kogpt2_kv_cache_bytes", NULL);
    return blocks > 0 && bytes > 0 ? bytes / blocks : 0;
}

// --- scenarios ---

static double *g_all; // (ALL_GAPS) gaps gathered for percentiles

static void scenario_streams(pid_t pid, int port, double seconds, int paged) {
    static const int SIZES[] = {16, 32, 64};
    for (size_t k = 0; k < sizeof SIZES / sizeof *SIZES; k++) {
        int n = SIZES[k];
        Stream st[MAX_CLIENTS];
        pthread_t tid[MAX_CLIENTS];
        double t0 = kg_now_s(), cpu0 = bench_cpu_seconds(pid);
        streams_new(st, n, port, t0 + seconds, 20, 0, g_max_tokens);
        streams_run(st, n, tid);
        streams_join(tid, n);
        double dt = kg_now_s() - t0, cpu = bench_cpu_seconds(pid) - cpu0;
        size_t tokens = 0, errors = 0, n_ttft = 0;
        for (int i = 0; i < n; i++)
            tokens += st[i].tokens, errors += st[i].errors;
        size_t ng = gaps_collect(st, n, 0, 1e30, g_all);
        double med = bench_pct(g_all, ng, 0.5), p99 = bench_pct(g_all, ng, 0.99);
        // Each gap against growth: in the step that produced its token (streams run in lockstep,
        // one token each per step: events within 2 ms), did any stream need more KV? Counted
        // for the slow gaps (over 3x the median) and for all, so that a share that only
        // chance gives (16 streams cross a block boundary in most steps) shows as such.
        size_t slow = 0, slow_grow = 0, all_grow = 0, all = 0;
        for (int i = 0; i < n; i++)
            for (size_t g = 0; g < st[i].n_gaps; g++) {
                int grew = 0;
                for (int o = 0; o < n && !grew; o++)
                    for (size_t h = 0; h < st[o].n_gaps && !grew; h++)
                        grew = fabs(st[o].gap_end[h] - st[i].gap_end[g]) < 0.002 &&
                               grows_at(st[o].gap_pos[h], st[o].n_prompt, paged);
                all++;
                all_grow += grew;
                if (st[i].gap[g] <= 3 * med) continue;
                slow++;
                slow_grow += grew;
            }
        double *ttft = malloc((MAX_CLIENTS * 1024) * sizeof *ttft);
        for (int i = 0; i < n; i++)
            for (size_t t = 0; t < st[i].n_ttft && n_ttft < MAX_CLIENTS * 1024; t++)
                ttft[n_ttft++] = st[i].ttft[t];
        qsort(ttft, n_ttft, sizeof *ttft, bench_cmp_double);
        printf("result %s scenario=streams clients=%d tok_s=%.1f cpu_s=%.1f tok_per_cpu_s=%.1f "
               "ttft_p50_ms=%.1f gap_p50_ms=%.1f gap_p99_ms=%.1f slow_gaps=%zu/%zu "
               "slow_with_growth=%zu growth_share_slow=%.2f growth_share_all=%.2f errors=%zu\n",
               g_label, n, (double)tokens / dt, cpu, cpu > 0 ? (double)tokens / cpu : 0,
               1e3 * bench_pct(ttft, n_ttft, 0.5), 1e3 * med, 1e3 * p99, slow, ng, slow_grow,
               slow ? (double)slow_grow / slow : 0, all ? (double)all_grow / all : 0, errors);
        fflush(stdout);
        free(ttft);
        streams_free(st, n);
    }
}

typedef struct {
    int port;
    double until;
    double windows[16][2];
    int n_windows;
} Arrivals;

// Every 8 s a 512-token prompt (one token generated), its [submitted, answered] window kept.
static void *arrivals_main(void *arg) {
    Arrivals *a = arg;
    char *body = malloc(16384);
    Stream one = {.id = 99, .n_prompt = g_prompt, .max_tokens = 1, .rng = 77};
    sleep(6); // the streams reach their pace first
    while (kg_now_s() + 2 < a->until && a->n_windows < 16) {
        BenchConn c;
        bench_conn_open(&c, a->port);
        one.rng += 1; // another prompt each time: nothing cached
        random_prompt(body, 16384, &one);
        memcpy(strstr(body, "\"stream\":true") + 9, "null", 4); // not streamed (null: default)
        double t0 = kg_now_s();
        if (bench_http_request(&c, "/v1/generate", body, NULL, 0) != 200)
            fprintf(stderr, "bench_serving: the long prompt was refused\n");
        a->windows[a->n_windows][0] = t0;
        a->windows[a->n_windows++][1] = kg_now_s();
        bench_conn_close(&c);
        sleep(8);
    }
    free(body);
    return NULL;
}

static void scenario_prefill(int port, double seconds) {
    const int n = 16;
    Stream st[MAX_CLIENTS];
    pthread_t tid[MAX_CLIENTS], arr;
    double t0 = kg_now_s();
    Arrivals a = {.port = port, .until = t0 + seconds};
    streams_new(st, n, port, t0 + seconds, 20, 0, g_max_tokens);
    streams_run(st, n, tid);
    pthread_create(&arr, NULL, arrivals_main, &a);
    pthread_join(arr, NULL);
    streams_join(tid, n);
    size_t ng = gaps_collect(st, n, t0 + 5, 1e30, g_all); // the steady pace, after a warm-up
    double med = bench_pct(g_all, ng, 0.5);
    // the gaps while a long prompt is in (from its submission to half a second after its
    // answer), and the others after the warm-up: what the streams see without one
    double *in = malloc(MAX_GAPS * sizeof *in), *out = malloc(MAX_GAPS * sizeof *out);
    size_t k = 0, o = 0;
    double prompt_ms = 0;
    for (int w = 0; w < a.n_windows; w++)
        prompt_ms += 1e3 * (a.windows[w][1] - a.windows[w][0]) / a.n_windows;
    for (int i = 0; i < n; i++)
        for (size_t g = 0; g < st[i].n_gaps; g++) {
            double t = st[i].gap_end[g];
            int during = 0;
            for (int w = 0; w < a.n_windows; w++)
                during |= t >= a.windows[w][0] && t <= a.windows[w][1] + 0.5;
            if (during && k < MAX_GAPS) in[k++] = st[i].gap[g];
            if (!during && t >= t0 + 5 && o < MAX_GAPS) out[o++] = st[i].gap[g];
        }
    qsort(in, k, sizeof *in, bench_cmp_double);
    qsort(out, o, sizeof *out, bench_cmp_double);
    printf("result %s scenario=prefill streams=16 prompt=%zu prompts=%d prompt_ms=%.0f "
           "gap_p50_ms=%.1f without_p99_ms=%.1f during_p50_ms=%.1f during_p99_ms=%.1f "
           "during_max_ms=%.1f p99_over_median=%.2f\n",
           g_label, g_prompt, a.n_windows, prompt_ms, 1e3 * med, 1e3 * bench_pct(out, o, 0.99),
           1e3 * bench_pct(in, k, 0.5), 1e3 * bench_pct(in, k, 0.99), k ? 1e3 * in[k - 1] : 0,
           med > 0 ? bench_pct(in, k, 0.99) / med : 0);
    fflush(stdout);
    free(in);
    free(out);
    streams_free(st, n);
}

typedef struct {
    pid_t pid;
    int port;
    volatile int stop;
    size_t peak_rss;
    double peak_used, peak_refs, peak_held; // KV blocks: in use, table entries, used + cached
} Sampler;

static void *sampler_main(void *arg) {
    Sampler *s = arg;
    while (!s->stop) {
        size_t r = (size_t)bench_rss_bytes(s->pid);
        double used = metric(s->port, "kogpt2_kv_blocks", "state=\"used\"");
        double refs = metric(s->port, "kogpt2_kv_block_refs", NULL);
        double held = used + metric(s->port, "kogpt2_kv_blocks", "state=\"cached\"");
        if (held > s->peak_held) s->peak_held = held;
        if (r > s->peak_rss) s->peak_rss = r;
        if (used > s->peak_used) {
            s->peak_used = used;
            s->peak_refs = refs;
        }
        usleep(200000);
    }
    return NULL;
}

// n streams of prompts of n_prompt tokens (the first n_shared shared) generating max_tokens,
// once each: peak RSS and KV blocks.
static void scenario_memory(pid_t pid, int port, const char *name, size_t n_prompt, size_t n_shared,
                            size_t max_tokens) {
    const int n = 32;
    size_t idle = (size_t)bench_rss_bytes(pid);
    Stream st[MAX_CLIENTS];
    pthread_t tid[MAX_CLIENTS], smp;
    Sampler sm = {.pid = pid, .port = port};
    pthread_create(&smp, NULL, sampler_main, &sm);
    streams_new(st, n, port, 0, n_prompt, n_shared, max_tokens);
    streams_run(st, n, tid);
    streams_join(tid, n);
    sm.stop = 1;
    pthread_join(smp, NULL);
    size_t tokens = 0, errors = 0;
    for (int i = 0; i < n; i++)
        tokens += st[i].tokens, errors += st[i].errors;
    double bb = block_bytes(port);
    double kv = sm.peak_used > 0 ? sm.peak_used * bb : 0;
    double held = sm.peak_held > 0 ? sm.peak_held * bb : 0;
    printf("result %s scenario=%s streams=%d prompt=%zu shared=%zu max_tokens=%zu idle_rss_mb=%.1f "
           "peak_rss_mb=%.1f kv_used_blocks=%.0f kv_block_refs=%.0f kv_used_mb=%.1f "
           "rss_over_idle_plus_kv_mb=%.1f kv_held_blocks=%.0f kv_held_mb=%.1f "
           "rss_over_idle_plus_held_mb=%.1f tokens=%zu errors=%zu\n",
           g_label, name, n, n_prompt, n_shared, max_tokens, idle / 1048576.0,
           sm.peak_rss / 1048576.0, sm.peak_used, sm.peak_refs, kv / 1048576.0,
           (sm.peak_rss - (double)idle - kv) / 1048576.0, sm.peak_held, held / 1048576.0,
           (sm.peak_rss - (double)idle - held) / 1048576.0, tokens, errors);
    fflush(stdout);
    streams_free(st, n);
}

// utime + stime ticks of every thread of pid, with its name, into ticks/names (cap); how many.
static int thread_ticks(pid_t pid, long *ticks, int *tids, char (*names)[32], int cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && n < cap && (e = readdir(d));) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char f[320], line[1024];
        snprintf(f, sizeof f, "/proc/%d/task/%s/stat", (int)pid, e->d_name);
        FILE *fp = fopen(f, "r");
        if (!fp) continue;
        if (fgets(line, sizeof line, fp)) {
            char *open = strchr(line, '('), *close_ = strrchr(line, ')');
            unsigned long ut = 0, stt = 0;
            if (open && close_ &&
                sscanf(close_ + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                       &stt) == 2) {
                tids[n] = atoi(e->d_name);
                snprintf(names[n], sizeof names[n], "%.*s", (int)(close_ - open - 1), open + 1);
                ticks[n++] = (long)(ut + stt);
            }
        }
        fclose(fp);
    }
    if (d) closedir(d);
    return n;
}

static void scenario_threads(pid_t pid, int port, double seconds) {
    const int n = 32;
    Stream st[MAX_CLIENTS];
    pthread_t tid[MAX_CLIENTS];
    double t0 = kg_now_s();
    streams_new(st, n, port, t0 + seconds + 4, 20, 0, g_max_tokens);
    streams_run(st, n, tid);
    sleep(2); // every stream running
    long a[256], b[256];
    int ta[256], tb[256];
    char na[256][32], nb[256][32];
    double w0 = kg_now_s();
    int n0 = thread_ticks(pid, a, ta, na, 256);
    sleep((unsigned)seconds);
    int n1 = thread_ticks(pid, b, tb, nb, 256);
    double wall = kg_now_s() - w0, hz = (double)sysconf(_SC_CLK_TCK);
    streams_join(tid, n);
    size_t tokens = 0;
    for (int i = 0; i < n; i++)
        tokens += st[i].tokens;
    printf("result %s scenario=threads streams=%d", g_label, n);
    for (int j = 0; j < n1; j++)
        for (int i = 0; i < n0; i++)
            if (ta[i] == tb[j] && b[j] - a[i] > 0)
                printf(" %s/%d=%.2f", nb[j], tb[j], (double)(b[j] - a[i]) / hz / wall);
    printf(" tokens=%zu\n", tokens);
    fflush(stdout);
    streams_free(st, n);
}

int main(int argc, char **argv) {
    const char *model = NULL, *shape = "base", *exe_flag = NULL;
    char scenarios[256] = "streams,prefill,memory,shared,threads";
    double seconds = 20;
    int threads = 0;
    static const struct option OPTS[] = {
        {"kogpt2d", required_argument, NULL, 'k'}, {"model", required_argument, NULL, 'm'},
        {"shape", required_argument, NULL, 's'},   {"seconds", required_argument, NULL, 'S'},
        {"threads", required_argument, NULL, 't'}, {"scenario", required_argument, NULL, 'c'},
        {"label", required_argument, NULL, 'l'},   {"max-tokens", required_argument, NULL, 'x'},
        {"prompt", required_argument, NULL, 'P'},  {NULL, 0, NULL, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", OPTS, NULL)) != -1) {
        if (o == 'k')
            exe_flag = optarg;
        else if (o == 'm')
            model = optarg;
        else if (o == 's')
            shape = optarg;
        else if (o == 'S')
            seconds = atof(optarg);
        else if (o == 't')
            threads = atoi(optarg);
        else if (o == 'c')
            snprintf(scenarios, sizeof scenarios, "%s", optarg);
        else if (o == 'l')
            g_label = optarg;
        else if (o == 'x')
            g_max_tokens = (size_t)atol(optarg);
        else if (o == 'P')
            g_prompt = (size_t)atol(optarg);
        else
            return 2;
    }
    const char *const *extra = (const char *const *)argv + optind; // after `--`: kogpt2d's
    signal(SIGPIPE, SIG_IGN);
    char exe[PATH_MAX], self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return 1;
    self[len] = '\0';
    if (exe_flag)
        snprintf(exe, sizeof exe, "%s", exe_flag);
    else
        snprintf(exe, sizeof exe, "%s/kogpt2d", dirname(self));
    char dir[] = "/tmp/kg_bench_serving_XXXXXX";
    if (!model) {
        if (!mkdtemp(dir) || bench_model_write(dir, shape)) return 1;
        model = dir;
    }
    g_all = malloc(ALL_GAPS * sizeof *g_all);
    // the paged engine reports KV blocks; the old one has no such metric (growth by doubling)
    char *save;
    for (char *sc = strtok_r(scenarios, ",", &save); sc; sc = strtok_r(NULL, ",", &save)) {
        int port = bench_free_port();
        pid_t pid = bench_daemon_start(exe, model, port, threads, extra);
        int paged = metric(port, "kogpt2_kv_block_refs", NULL) >= 0;
        static char models[1 << 16];
        BenchConn c;
        if (!bench_conn_open(&c, port) &&
            bench_http_request(&c, "/v1/models", NULL, models, sizeof models) == 200 &&
            strstr(models, "\"vocab_size\":"))
            g_vocab = strtoul(strstr(models, "\"vocab_size\":") + 13, NULL, 10);
        bench_conn_close(&c);
        if (!strcmp(sc, "streams"))
            scenario_streams(pid, port, seconds, paged);
        else if (!strcmp(sc, "prefill"))
            scenario_prefill(port, seconds + 20);
        else if (!strcmp(sc, "memory"))
            scenario_memory(pid, port, "memory", g_prompt, 0, 124);
        else if (!strcmp(sc, "shared"))
            scenario_memory(pid, port, "shared", SYSTEM_TOKENS + 16, SYSTEM_TOKENS, 64);
        else if (!strcmp(sc, "threads"))
            scenario_threads(pid, port, seconds);
        else
            fprintf(stderr, "bench_serving: unknown scenario '%s'\n", sc);
        bench_daemon_stop(pid);
    }
    free(g_all);
    return 0;
}
