// bench_http.h — what the server benchmarks share: a minimal keep-alive HTTP/1.1 client over
// 127.0.0.1, kogpt2d started and stopped as a child process, a free port, percentiles, and a
// random model with the shared v2 tokenizer written into a directory.
#ifndef BENCH_HTTP_H
#define BENCH_HTTP_H

// (the including file defines _GNU_SOURCE first, for strcasestr)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tests/testmodel.h"

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// --- a minimal keep-alive HTTP/1.1 client ---

typedef struct {
    int fd, port;
    char buf[1 << 16];
    size_t len;
} Conn;

static inline int conn_open(Conn *c, int port) {
    c->port = port;
    c->len = 0;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return connect(c->fd, (struct sockaddr *)&a, sizeof a);
}

// Sends a POST of body (or a GET when body is NULL) on c; -1 when the socket failed.
static inline int conn_send(Conn *c, const char *path, const char *body) {
    size_t blen = body ? strlen(body) : 0, cap = blen + 512;
    char *req = malloc(cap);
    if (!req) return -1;
    int n = body ? snprintf(req, cap,
                            "POST %s HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
                            "Content-Length: %zu\r\n\r\n%s",
                            path, blen, body)
                 : snprintf(req, cap, "GET %s HTTP/1.1\r\nHost: b\r\n\r\n", path);
    int rc = send(c->fd, req, (size_t)n, MSG_NOSIGNAL) == n ? 0 : -1;
    free(req);
    return rc;
}

// POSTs body (or GETs when body is NULL); returns the status and copies the body into out.
static inline int conn_request(Conn *c, const char *path, const char *body, char *out, size_t cap) {
    if (conn_send(c, path, body)) return -1;
    c->len = 0;
    char *hdr_end = NULL;
    while (!hdr_end) {
        ssize_t got = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len - 1, 0);
        if (got <= 0) return -1;
        c->len += (size_t)got;
        c->buf[c->len] = '\0';
        hdr_end = strstr(c->buf, "\r\n\r\n");
    }
    int status = atoi(c->buf + 9);
    const char *cl = strcasestr(c->buf, "Content-Length:");
    size_t want = cl ? strtoul(cl + 15, NULL, 10) : 0;
    size_t head = (size_t)(hdr_end + 4 - c->buf);
    while (c->len - head < want && c->len < sizeof c->buf - 1) {
        ssize_t got = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len - 1, 0);
        if (got <= 0) return -1;
        c->len += (size_t)got;
    }
    c->buf[c->len] = '\0';
    if (out) snprintf(out, cap, "%s", c->buf + head);
    return status;
}

// --- the daemon ---

// Starts exe (kogpt2d) on model at port with threads and the NULL-terminated extra arguments
// (up to 12), its stderr to /dev/null; waits up to 60 s for /readyz. Exits on failure.
static inline pid_t daemon_start_argv(const char *exe, const char *model, int port, int threads,
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
        Conn c;
        if (conn_open(&c, port) == 0) {
            int st = conn_request(&c, "/readyz", NULL, NULL, 0);
            close(c.fd);
            if (st == 200) return pid;
        } else {
            close(c.fd);
        }
        usleep(100000);
    }
    fprintf(stderr, "bench: kogpt2d did not become ready\n");
    kill(pid, SIGKILL);
    exit(1);
}

static inline void daemon_stop(pid_t pid) {
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

static inline int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

// --- figures ---

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The p-th quantile (0..1) of v (n, sorted).
static inline double pct(const double *v, size_t n, double p) {
    return n ? v[(size_t)(p * (double)(n - 1) + 0.5)] : 0;
}

// --- a model ---

// Copies a file (the shared tokenizer); 0 or -1.
static inline int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    if (!out) {
        if (in) fclose(in);
        return -1;
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in);
    return fclose(out);
}

// A random model of the shape ("tiny": 2 layers x 64; "base": KoGPT2-base's 12 x 768, n_ctx
// 1024), f32, vocabulary 51,200, with the shared v2 tokenizer ($KG_SHARED_DIR, default
// ../shared), written into dir (a mkdtemp template). 0, or -1 with a message on stderr.
static inline int bench_model_write(char *dir, const char *shape) {
    const char *shared = getenv("KG_SHARED_DIR") ? getenv("KG_SHARED_DIR") : "../shared";
    char tok[4096], dst[4200], err[KG_ERRLEN] = "";
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
    if (!mkdtemp(dir) || testmodel_write(dir, &sp, err)) {
        fprintf(stderr, "bench: cannot write a model: %s\n", err);
        return -1;
    }
    snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
    if (copy_file(tok, dst)) {
        fprintf(stderr, "bench: %s is missing (set KG_SHARED_DIR)\n", tok);
        return -1;
    }
    printf("model: random %s shape (%zu layers, %zu wide, vocab 51200, f32)\n", shape, sp.L, sp.C);
    return 0;
}

#endif
