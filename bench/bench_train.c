// bench_train — training speed of the CPU backend: ms per optimizer step (forward, backward,
// AdamW) and tokens/s, at the KoGPT2-base shape and at the default model's shape, for 1 and 2
// threads, activation recompute off and on, with the activation memory and peak RSS.
//
//   build/bench_train [--shapes base,default] [--threads 1,2] [--steps 3] [--batch 4 --seq 64]
//
// Each configuration runs in its own child process (so peak RSS is its own): one warm-up
// step, then --steps timed steps on random tokens. 1 vs 2 ranks: bench/bench_train_mpi.sh.
// Figures only: nothing here passes or fails. For reference (issue 5): llm.c's CPU trainer
// takes about 7.5 s per step at the base shape, B=4, T=64, 2 threads on this machine.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/kg.h"
#include "model/backend.h"
#include "model/gpt2.h"
#include "train/adamw.h"

#include "bench_util.h"

typedef struct {
    const char *name;
    size_t L, C, NH, T, V;
} Shape;

static const Shape SHAPES[] = {
    {"base", 12, 768, 12, 1024, 51200}, // KoGPT2-base-v2
    {"default", 6, 256, 8, 512, 12000}, // models/default (models/train_default.sh)
};

typedef struct {
    double ms_step, ms_fwd, ms_bwd, ms_opt;
    size_t act_bytes, params;
} Result;

static int run_config(const Shape *s, int threads, int recompute, size_t B, size_t T, int steps,
                      Result *r, char *err) {
    KgBackend *be = kg_cpu_backend_new(threads, err);
    if (!be) return KG_ENOMEM;
    Gpt2Config c = gpt2_config_shape(s->L, s->C, s->NH, s->T, s->V);
    Gpt2 m;
    int rc = gpt2_train_model_new(&m, &c, NULL, be, 1, err);
    if (rc) {
        kg_backend_free(be);
        return rc;
    }
    size_t n = gpt2_param_count(&c), nt = gpt2_param_tensors(&c, NULL);
    Gpt2ParamTensor *tensors = malloc(nt * sizeof *tensors);
    int *in = malloc(B * T * sizeof *in), *tg = malloc(B * T * sizeof *tg);
    AdamW opt = {0};
    Gpt2Train *t = gpt2_train_new(&m, B, T, recompute, err);
    if (!t || !tensors || !in || !tg || adamw_init(&opt, be, n, err)) {
        rc = KG_ENOMEM;
        goto end;
    }
    gpt2_param_tensors(&c, tensors);
    uint64_t rng = 42;
    for (size_t i = 0; i < B * T; i++) {
        in[i] = (int)(bench_rand(&rng) % s->V);
        tg[i] = (int)(bench_rand(&rng) % s->V);
    }
    AdamWHyper h = ADAMW_DEFAULTS;
    memset(r, 0, sizeof *r);
    for (int k = -1; k < steps; k++) { // k = -1: warm-up
        float loss;
        double t0 = kg_now_s();
        gpt2_train_zero_grad(t);
        if ((rc = gpt2_train_forward(&m, t, in, tg, &loss, err))) goto end;
        double t1 = kg_now_s();
        gpt2_train_backward(&m, t);
        double t2 = kg_now_s();
        adamw_step(&opt, m.params, gpt2_train_grads(t), tensors, nt, 1e-4f, 1.0f, &h);
        double t3 = kg_now_s();
        if (k >= 0) {
            r->ms_fwd += (t1 - t0) * 1e3 / steps;
            r->ms_bwd += (t2 - t1) * 1e3 / steps;
            r->ms_opt += (t3 - t2) * 1e3 / steps;
            r->ms_step += (t3 - t0) * 1e3 / steps;
        }
    }
    r->act_bytes = gpt2_train_bytes(t);
    r->params = n;
end:
    adamw_free(&opt);
    if (t) gpt2_train_free(t);
    free(in);
    free(tg);
    free(tensors);
    gpt2_close(&m);
    kg_backend_free(be);
    return rc;
}

// Runs one configuration in a child; *maxrss_kb is the child's peak RSS.
static int run_child(const Shape *s, int threads, int recompute, size_t B, size_t T, int steps,
                     Result *r, long *maxrss_kb, char *err) {
    int fds[2];
    if (pipe(fds)) return kg_err(err, KG_EIO, "pipe failed");
    pid_t pid = fork();
    if (pid < 0) return kg_err(err, KG_EIO, "fork failed");
    if (pid == 0) {
        close(fds[0]);
        Result res;
        char cerr[KG_ERRLEN] = "";
        int rc = run_config(s, threads, recompute, B, T, steps, &res, cerr);
        if (rc) fprintf(stderr, "bench_train: %s\n", cerr);
        ssize_t w = write(fds[1], &res, sizeof res);
        _exit(rc || w != (ssize_t)sizeof res);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], r, sizeof *r);
    close(fds[0]);
    int status;
    struct rusage ru;
    wait4(pid, &status, 0, &ru);
    *maxrss_kb = ru.ru_maxrss;
    if (got != (ssize_t)sizeof *r || !WIFEXITED(status) || WEXITSTATUS(status))
        return kg_err(err, KG_EINTERNAL, "configuration failed");
    return KG_OK;
}

// "1,2" -> {1, 2}; returns the count (at most cap).
static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    for (const char *p = s; *p && n < cap;) {
        out[n++] = atoi(p);
        const char *comma = strchr(p, ',');
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"shapes", required_argument, 0, 's'}, {"threads", required_argument, 0, 't'},
        {"steps", required_argument, 0, 'n'},  {"batch", required_argument, 0, 'b'},
        {"seq", required_argument, 0, 'q'},    {0, 0, 0, 0}};
    const char *shapes = "base,default";
    int threads[8] = {1, 2}, n_threads = 2, steps = 3;
    size_t B = 4, T = 64;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 's':
            shapes = optarg;
            break;
        case 't':
            n_threads = parse_list(optarg, threads, 8);
            break;
        case 'n':
            steps = atoi(optarg);
            break;
        case 'b':
            B = (size_t)atol(optarg);
            break;
        case 'q':
            T = (size_t)atol(optarg);
            break;
        default:
            fprintf(stderr, "usage: bench_train [--shapes base,default] [--threads 1,2] "
                            "[--steps N] [--batch B] [--seq T]\n");
            return 2;
        }
    }
    if (steps < 1 || !B || !T) return 2;
    printf("bench_train: B=%zu T=%zu, %d timed steps after 1 warm-up (forward + backward + "
           "AdamW)\n",
           B, T, steps);
    printf("%-8s %8s %7s %9s %10s %9s %9s %9s %10s %11s %9s\n", "shape", "params", "threads",
           "recompute", "ms/step", "fwd ms", "bwd ms", "adamw ms", "tok/s", "activ. MiB",
           "peak RSS");
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        if (!strstr(shapes, SHAPES[si].name)) continue;
        for (int ti = 0; ti < n_threads; ti++)
            for (int rec = 0; rec <= 1; rec++) {
                Result r;
                long rss = 0;
                char err[KG_ERRLEN];
                if (run_child(&SHAPES[si], threads[ti], rec, B, T, steps, &r, &rss, err)) {
                    printf("%-8s %s\n", SHAPES[si].name, err);
                    continue;
                }
                printf("%-8s %7.1fM %7d %9s %10.1f %9.1f %9.1f %9.1f %10.0f %11.1f %6.0f MiB\n",
                       SHAPES[si].name, r.params / 1e6, threads[ti], rec ? "on" : "off", r.ms_step,
                       r.ms_fwd, r.ms_bwd, r.ms_opt, B * T / (r.ms_step / 1e3),
                       r.act_bytes / 1048576.0, rss / 1024.0);
                fflush(stdout);
            }
    }
    return 0;
}
