// bench_daemon.h — the server benchmarks' side of kogpt2d (bench_server.c, bench_serving.c,
// bench_clients.c): the daemon started and stopped as a child process, a free port, a
// process's resident memory and CPU time from /proc, and a random model with the shared v2
// tokenizer written into a directory.
#ifndef BENCH_DAEMON_H
#define BENCH_DAEMON_H

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_http.h"
#include "tests/testmodel.h"

// Starts exe (kogpt2d) on model at port with threads and the NULL-terminated extra arguments
// (up to 12), its stderr to /dev/null; waits up to 60 s for /readyz. Exits on failure.
static inline pid_t bench_daemon_start(const char *exe, const char *model, int port, int threads,
                                       const char *const *extra) {
    pid_t pid = fork();
    if (pid == 0) {
        char p[16], t[16];
        snprintf(p, sizeof p, "%d", port);
        snprintf(t, sizeof t, "%d", threads);
        const char *argv[24] = {exe, "--model", model,         "--port", p,   "--threads",
                                t,   "--quiet", "--max-queue", "256",    NULL};
        size_t n = 10;
        for (size_t i = 0; extra && extra[i] && n < 22; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        if (!freopen("/dev/null", "w", stderr)) _exit(127);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 600; i++) { // up to 60 s to load
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr, "bench: kogpt2d exited while loading (%s)\n", exe);
            exit(1);
        }
        BenchConn c;
        int up = bench_conn_open(&c, port) == 0 &&
                 bench_http_request(&c, "/readyz", NULL, NULL, 0) == 200;
        bench_conn_close(&c);
        if (up) return pid;
        usleep(100000);
    }
    fprintf(stderr, "bench: kogpt2d did not become ready\n");
    kill(pid, SIGKILL);
    exit(1);
}

static inline void bench_daemon_stop(pid_t pid) {
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

// A TCP port on 127.0.0.1 that was free a moment ago.
static inline int bench_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

// Resident bytes of pid now (VmRSS), or 0 when /proc has no such process.
static inline double bench_rss_bytes(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atof(line + 6);
    if (f) fclose(f);
    return kb * 1024;
}

// CPU seconds (user + system) pid has used so far, or -1 when /proc has no such process:
// throughput per CPU second is what a busy shared machine leaves comparable across runs that
// got different shares of it.
static inline double bench_cpu_seconds(pid_t pid) {
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const char *p = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL; // name may hold ' '
    fclose(f);
    unsigned long long utime, stime;
    if (!p ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

// Writes a random model of the shape ("tiny": 2 layers x 64; "base": KoGPT2-base's 12 x 768,
// n_ctx 1024), f32, vocabulary 51,200, with the shared v2 tokenizer ($KG_SHARED_DIR, default
// ../shared), into dir, an existing directory. 0, or -1 with a message on stderr.
static inline int bench_model_write(const char *dir, const char *shape) {
    const char *shared = getenv("KG_SHARED_DIR") ? getenv("KG_SHARED_DIR") : "../shared";
    char tok[4096], dst[4096], err[KG_ERRLEN] = "";
    snprintf(tok, sizeof tok, "%s/data/kogpt2/v2/tokenizer.no_endoftext.json", shared);
    int base = !strcmp(shape, "base");
    TestModelSpec sp = {.L = base ? 12 : 2,
                        .C = base ? 768 : 64,
                        .NH = base ? 12 : 2,
                        .T = base ? 1024 : 256,
                        .V = 51200,
                        .dtype = KG_F32,
                        .wte_std = 0.5f,
                        .seed = 7};
    if (kg_path_join(dst, sizeof dst, dir, "tokenizer.json") || testmodel_write(dir, &sp, err) ||
        kg_copy_file(tok, dst, err)) {
        fprintf(stderr, "bench: cannot write a model into %s: %s (set KG_SHARED_DIR)\n", dir, err);
        return -1;
    }
    printf("model: random %s shape (%zu layers, %zu wide, vocab 51200, f32) in %s\n", shape, sp.L,
           sp.C, dir);
    return 0;
}

#endif
