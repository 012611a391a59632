// bench_http.h — the one HTTP/1.1 client of the benchmarks that load a server on 127.0.0.1
// (bench_server.c, bench_serving.c, bench_clients.c): keep-alive, one request at a time per
// connection, a body framed by Content-Length, by chunks (streams: kogpt2d and llama-server
// send Server-Sent Events chunked) or by the connection's end, handed to a callback piece by
// piece as it arrives, or read whole; a stream's "data:" lines split out of those pieces.
// Not a general client: no TLS, no redirects, no 100-continue.
#ifndef BENCH_HTTP_H
#define BENCH_HTTP_H

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    int fd;
    char buf[1 << 16];
    size_t off, len; // bytes received and not consumed yet: buf[off, len)
} BenchConn;

// Connects to 127.0.0.1:port (TCP_NODELAY). 0, or -1 (c->fd may still need bench_conn_close).
static inline int bench_conn_open(BenchConn *c, int port) {
    c->off = c->len = 0;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return connect(c->fd, (struct sockaddr *)&a, sizeof a);
}

static inline void bench_conn_close(BenchConn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

// Sends a POST of the JSON body to path, or a GET when body is NULL. 0, or -1.
static inline int bench_http_send(BenchConn *c, const char *path, const char *body) {
    char head[512];
    size_t nb = body ? strlen(body) : 0;
    int n = body ? snprintf(head, sizeof head,
                            "POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                            "Content-Length: %zu\r\n\r\n",
                            path, nb)
                 : snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: bench\r\n\r\n", path);
    if (n <= 0 || (size_t)n >= sizeof head) return -1;
    if (send(c->fd, head, (size_t)n, MSG_NOSIGNAL | (nb ? MSG_MORE : 0)) != n) return -1;
    for (size_t sent = 0; sent < nb;) {
        ssize_t k = send(c->fd, body + sent, nb - sent, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        sent += (size_t)k;
    }
    return 0;
}

// Receives more bytes into the buffer (moving the unconsumed ones to its start first).
// The count received; 0 at the connection's end or when the buffer is full of one unread
// piece; -1 on an error.
static inline ssize_t bench_conn_fill(BenchConn *c) {
    if (c->off) {
        memmove(c->buf, c->buf + c->off, c->len - c->off);
        c->len -= c->off;
        c->off = 0;
    }
    if (c->len >= sizeof c->buf - 1) return 0;
    ssize_t k = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, 0);
    if (k > 0) c->len += (size_t)k;
    c->buf[c->len] = '\0';
    return k;
}

// The next CRLF-terminated line, NUL-terminated in place (CRLF consumed), or NULL.
static inline char *bench_conn_line(BenchConn *c) {
    for (;;) {
        c->buf[c->len] = '\0';
        char *eol = strstr(c->buf + c->off, "\r\n");
        if (eol) {
            char *line = c->buf + c->off;
            *eol = '\0';
            c->off = (size_t)(eol + 2 - c->buf);
            return line;
        }
        if (bench_conn_fill(c) <= 0) return NULL;
    }
}

// The body's bytes as they arrive, piece by piece (a piece never spans two reads).
typedef void (*BenchOnData)(void *arg, const char *data, size_t n);

// Hands up to n bytes of the body (n = SIZE_MAX: until the connection ends) to on_data.
// 0 when all came (or the connection ended with n = SIZE_MAX), -1 when the connection broke.
static inline int bench_conn_body(BenchConn *c, size_t n, BenchOnData on_data, void *arg) {
    while (n) {
        if (c->off == c->len) {
            ssize_t k = bench_conn_fill(c);
            if (k < 0) return -1;
            if (k == 0) return n == SIZE_MAX ? 0 : -1;
        }
        size_t k = c->len - c->off < n ? c->len - c->off : n;
        if (on_data) on_data(arg, c->buf + c->off, k);
        c->off += k;
        if (n != SIZE_MAX) n -= k;
    }
    return 0;
}

// Reads one response: its status, or -1 when the connection broke or the reply is not HTTP.
// The body goes to on_data (may be NULL). A reply without Content-Length or chunks is read
// to the connection's end, which closes the connection (c->fd is then -1).
static inline int bench_http_read(BenchConn *c, BenchOnData on_data, void *arg) {
    char *line = bench_conn_line(c);
    if (!line || strncmp(line, "HTTP/1.", 7) || strlen(line) < 12) return -1;
    int status = atoi(line + 9);
    long long length = -1;
    int chunked = 0;
    while ((line = bench_conn_line(c)) && *line) {
        for (char *p = line; *p; p++) // field names and these values are case-insensitive
            *p = (char)tolower((unsigned char)*p);
        if (!strncmp(line, "content-length:", 15)) length = atoll(line + 15);
        if (!strncmp(line, "transfer-encoding:", 18) && strstr(line, "chunked")) chunked = 1;
    }
    if (!line) return -1;
    if (chunked) {
        for (;;) {
            if (!(line = bench_conn_line(c))) return -1;
            size_t size = strtoul(line, NULL, 16);
            if (size == 0) break;
            if (bench_conn_body(c, size, on_data, arg) || !(line = bench_conn_line(c))) return -1;
        }
        while ((line = bench_conn_line(c)) && *line) // trailers, then the empty line
            ;
        return line ? status : -1;
    }
    if (length >= 0) return bench_conn_body(c, (size_t)length, on_data, arg) ? -1 : status;
    int rc = bench_conn_body(c, SIZE_MAX, on_data, arg);
    bench_conn_close(c);
    return rc ? -1 : status;
}

typedef struct {
    char *out;
    size_t cap, len;
} BenchBodyCopy;

static inline void bench_body_copy(void *arg, const char *data, size_t n) {
    BenchBodyCopy *b = arg;
    size_t k = b->len + n < b->cap ? n : b->cap - b->len;
    memcpy(b->out + b->len, data, k);
    b->len += k;
}

// One request on c: the status (-1 when it failed), the body copied into out (cap bytes at
// most, NUL-terminated; out may be NULL).
static inline int bench_http_request(BenchConn *c, const char *path, const char *body, char *out,
                                     size_t cap) {
    if (bench_http_send(c, path, body)) return -1;
    BenchBodyCopy b = {out, cap ? cap - 1 : 0, 0};
    int status = bench_http_read(c, out && cap ? bench_body_copy : NULL, &b);
    if (out && cap) out[b.len] = '\0';
    return status;
}

// --- Server-Sent Events ---

// One event's payload (the text after "data: ", NUL-terminated).
typedef void (*BenchOnEvent)(void *arg, const char *data);

// A stream's line being read: its bytes so far (a line over 8 KiB is cut to that).
typedef struct {
    BenchOnEvent on_event;
    void *arg;
    char line[8192];
    size_t len;
} BenchSse;

// A BenchOnData for bench_http_read with a BenchSse as arg: splits the body's pieces into
// lines (a line may span pieces) and hands each "data: " line's payload to sse->on_event as
// its newline arrives. Set sse->len to 0 before each stream.
static inline void bench_sse_data(void *arg, const char *data, size_t n) {
    BenchSse *sse = arg;
    for (size_t i = 0; i < n; i++) {
        if (data[i] != '\n') {
            if (sse->len < sizeof sse->line - 1) sse->line[sse->len++] = data[i];
            continue;
        }
        sse->line[sse->len] = '\0';
        if (!strncmp(sse->line, "data: ", 6)) sse->on_event(sse->arg, sse->line + 6);
        sse->len = 0;
    }
}

#endif
