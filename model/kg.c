#include "kg.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef KG_SOURCE_DIR
#define KG_SOURCE_DIR ""
#endif

int kg_err(char *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, KG_ERRLEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

int kg_open_regular(const char *path, int *fd, size_t *size, char *err) {
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); // O_NONBLOCK: a FIFO opens at once
    if (*fd < 0) return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(*fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(*fd);
        *fd = -1;
        return kg_err(err, KG_EFORMAT, "%s: not a regular file", path);
    }
    int fl = fcntl(*fd, F_GETFL);
    if (fl >= 0) fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size) *size = (size_t)sb.st_size;
    return KG_OK;
}

const char *kg_strerror(int code) {
    switch (code) {
    case KG_OK:
        return "ok";
    case KG_EINVAL:
        return "invalid";
    case KG_EIO:
        return "io";
    case KG_ENOMEM:
        return "out_of_memory";
    case KG_EFORMAT:
        return "format";
    case KG_ERANGE:
        return "out_of_range";
    case KG_EUNSUP:
        return "unsupported";
    case KG_EBUSY:
        return "busy";
    case KG_ECANCEL:
        return "cancelled";
    default:
        return "internal";
    }
}

static int is_dir(const char *path) {
    struct stat st;
    return path[0] && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *kg_find_data_dir(const char *rel, char *buf, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *dir = dirname(exe);
        static const char *const UP[] = {"", "../", "../share/kogpt2/"};
        for (size_t i = 0; i < sizeof UP / sizeof UP[0]; i++) {
            snprintf(buf, cap, "%s/%s%s", dir, UP[i], rel);
            if (is_dir(buf)) return buf;
        }
    }
    snprintf(buf, cap, "%s/%s", KG_SOURCE_DIR, rel);
    return KG_SOURCE_DIR[0] && is_dir(buf) ? buf : NULL;
}

int kg_path_join(char *out, size_t cap, const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b >= cap) {
        if (cap) out[0] = '\0';
        return -1;
    }
    memcpy(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
    return 0;
}
