// static.c — the Explorer's files from --web-dir: decoded, normalized, resolved with
// realpath and required to stay under the web root. No listings, no symlinks out.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http.h"

#define STATIC_MAX_FILE (64u << 20) // the Explorer is a few files of kilobytes

static const struct {
    const char *ext, *type;
} STATIC_TYPES[] = {
    {".html", "text/html; charset=utf-8"},
    {".htm", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", SRV_TYPE_JSON},
    {".svg", "image/svg+xml; charset=utf-8"},
    {".png", "image/png"},
    {".jpg", "image/jpeg"},
    {".ico", "image/x-icon"},
    {".txt", SRV_TYPE_TEXT},
    {".woff2", "font/woff2"},
    {".wasm", "application/wasm"},
};

const char *srv_mime_type(const char *path) {
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (dot && (!slash || dot > slash))
        for (size_t i = 0; i < sizeof STATIC_TYPES / sizeof STATIC_TYPES[0]; i++)
            if (!strcasecmp(dot, STATIC_TYPES[i].ext)) return STATIC_TYPES[i].type;
    return "application/octet-stream";
}

static int static_hex(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Percent-decodes url into out (cap bytes); 0 on a bad escape, a NUL byte or overflow.
// MHD hands us the path already unescaped once; decoding again catches %252e too.
static int static_decode(const char *url, char *out, size_t cap) {
    size_t o = 0;
    for (const char *p = url; *p; p++) {
        int c = (unsigned char)*p;
        if (c == '%') {
            int hi = static_hex(p[1]), lo = hi < 0 ? -1 : static_hex(p[2]);
            if (hi < 0 || lo < 0) return 0;
            c = hi * 16 + lo;
            p += 2;
        }
        if (c == 0 || c == '\\' || o + 1 >= cap) return 0;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 1;
}

// Every segment of path must be a plain name: no "", ".", ".." or hidden files.
static int static_safe_segments(const char *path) {
    const char *seg = path;
    for (;;) {
        const char *end = strchr(seg, '/');
        size_t n = end ? (size_t)(end - seg) : strlen(seg);
        if (n == 0 && end) return 0;          // "//"
        if (n > 0 && seg[0] == '.') return 0; // ".", "..", ".git"
        if (!end) return 1;
        seg = end + 1;
    }
}

char *srv_static_resolve(const char *root, const char *url, int *status) {
    char rel[1024], joined[PATH_MAX], root_real[PATH_MAX];
    *status = 404;
    if (url[0] != '/' || !static_decode(url + 1, rel, sizeof rel)) return NULL;
    if (rel[0] == '\0' || rel[strlen(rel) - 1] == '/') // a directory: its index.html only
        strncat(rel, "index.html", sizeof rel - strlen(rel) - 1);
    if (rel[0] == '/' || !static_safe_segments(rel)) return NULL;
    if (!realpath(root, root_real)) return NULL;
    if ((size_t)snprintf(joined, sizeof joined, "%s/%s", root_real, rel) >= sizeof joined)
        return NULL;
    char *real = realpath(joined, NULL);
    if (!real) return NULL;
    size_t n = strlen(root_real);
    struct stat st;
    if (strncmp(real, root_real, n) != 0 || real[n] != '/' || stat(real, &st) != 0 ||
        !S_ISREG(st.st_mode)) {
        *status = strncmp(real, root_real, n) == 0 ? 404 : 403; // a symlink out is 403
        free(real);
        return NULL;
    }
    *status = 200;
    return real;
}

enum MHD_Result srv_static(SrvReq *r, const char *web_dir, const char *url) {
    int status;
    if (!web_dir) return srv_reply_error(r, 404, "not found", NULL);
    char *real = srv_static_resolve(web_dir, url, &status);
    if (!real) return srv_reply_error(r, status, status == 403 ? "forbidden" : "not found", NULL);
    int fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    char *buf = NULL;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size > STATIC_MAX_FILE) {
        if (fd >= 0) close(fd);
        free(real);
        return srv_reply_error(r, 404, "not found", NULL);
    }
    size_t size = (size_t)st.st_size, got = 0;
    if (!(buf = malloc(size ? size : 1))) goto fail;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) goto fail;
        got += (size_t)n;
    }
    close(fd);
    enum MHD_Result ret = srv_reply(r, 200, srv_mime_type(real), buf, size, "Cache-Control",
                                    "no-cache", "Content-Security-Policy",
                                    "default-src 'self'; img-src 'self' data:; "
                                    "style-src 'self' 'unsafe-inline'; object-src 'none'; "
                                    "base-uri 'none'; frame-ancestors 'none'",
                                    NULL);
    free(real);
    free(buf);
    return ret;
fail:
    close(fd);
    free(real);
    free(buf);
    return srv_reply_error(r, 500, "could not read the file", NULL);
}
