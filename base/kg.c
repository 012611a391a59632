#include "base/kg.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
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

int kg_map_file(const char *path, void **map, size_t *size, char *err) {
    int fd, rc = kg_open_regular(path, &fd, size, err);
    if (rc) return rc;
    if (*size == 0) {
        close(fd);
        return kg_err(err, KG_EFORMAT, "%s: an empty file", path);
    }
    // MAP_POPULATE: a model's every weight is read at load anyway (the NaN/inf pass, or the
    // copy to a GPU); mapping the cached pages in one call is cheaper than ~120 k faults of
    // 500 MB touched page by page (bench/bench_load.py: 10-50 % off gpt2_open here)
    *map = mmap(NULL, *size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd); // the mapping keeps the file
    if (*map == MAP_FAILED) {
        *map = NULL;
        return kg_err(err, KG_EIO, "mmap %s: %s", path, strerror(errno));
    }
    return KG_OK;
}

void kg_drop_pages(const void *p, size_t bytes) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = ((uintptr_t)p + page - 1) & ~(page - 1),
              to = ((uintptr_t)p + bytes) & ~(page - 1);
    if (to > from) madvise((void *)from, to - from, MADV_DONTNEED);
}

int kg_grow(void *arrp, size_t *cap, size_t need, size_t elem, char *err) {
    if (need <= *cap) return KG_OK;
    size_t n = *cap ? *cap : 16, bytes;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2; // doubling: amortized O(1) appends
    void *arr, *grown;
    memcpy(&arr, arrp, sizeof arr); // arrp points at a T *, not at a void *: no aliasing cast
    if (kg_mul_overflow(n, elem, &bytes))
        n = need; // doubled past size_t: exactly need, if that fits
    if (kg_mul_overflow(n, elem, &bytes) || !(grown = realloc(arr, bytes)))
        return kg_err(err, KG_ENOMEM, "out of memory for %zu elements of %zu bytes", need, elem);
    memcpy(arrp, &grown, sizeof grown);
    *cap = n;
    return KG_OK;
}

const char *kg_show(char *out, size_t cap, const char *s, size_t n) {
    size_t k = n < cap - 1 ? n : cap - 1;
    for (size_t i = 0; i < k; i++)
        out[i] = (unsigned char)s[i] >= 32 && (unsigned char)s[i] < 127 ? s[i] : '?';
    out[k] = '\0';
    return out;
}

int kg_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int kg_exe_dir(char *buf, size_t cap, char *err) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return kg_err(err, KG_EIO, "readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = '\0';
    const char *dir = dirname(exe);
    if ((size_t)snprintf(buf, cap, "%s", dir) >= cap)
        return kg_err(err, KG_EIO, "the program's directory is longer than %zu bytes", cap);
    return KG_OK;
}

char *kg_find_data_dir(const char *rel, char *buf, size_t cap) {
    char dir[PATH_MAX];
    if (!kg_exe_dir(dir, sizeof dir, NULL)) {
        static const char *const UP[] = {"", "../", "../share/kogpt2/"};
        for (size_t i = 0; i < sizeof UP / sizeof UP[0]; i++) {
            snprintf(buf, cap, "%s/%s%s", dir, UP[i], rel);
            if (kg_is_dir(buf)) return buf;
        }
    }
    snprintf(buf, cap, "%s/%s", KG_SOURCE_DIR, rel);
    return KG_SOURCE_DIR[0] && kg_is_dir(buf) ? buf : NULL;
}

double kg_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int kg_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
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

int kg_read_file(const char *path, size_t max, char **out, size_t *len, char *err) {
    *out = NULL;
    int fd;
    size_t size;
    int rc = kg_open_regular(path, &fd, &size, err);
    if (rc) return rc;
    char *buf = size <= max ? malloc(size + 1) : NULL;
    if (size > max)
        rc = kg_err(err, KG_EFORMAT, "%s: %zu bytes, more than the %zu expected", path, size, max);
    else if (!buf)
        rc = kg_err(err, KG_ENOMEM, "%s: out of memory", path);
    for (size_t got = 0; !rc && got < size;) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n <= 0 && !(n < 0 && errno == EINTR))
            rc = kg_err(err, KG_EIO, "read %s: %s", path, n ? strerror(errno) : "short read");
        else if (n > 0)
            got += (size_t)n;
    }
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[size] = '\0';
    *out = buf;
    if (len) *len = size;
    return KG_OK;
}

int kg_copy_file(const char *src, const char *dst, char *err) {
    int fd, rc = kg_open_regular(src, &fd, NULL, err);
    if (rc) return rc;
    FILE *in = fdopen(fd, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    if (!out) {
        rc = kg_err(err, KG_EIO, "open %s: %s", in ? dst : src, strerror(errno));
        if (in)
            fclose(in);
        else
            close(fd);
        return rc;
    }
    char buf[1 << 16];
    int bad = 0;
    for (size_t n; !bad && (n = fread(buf, 1, sizeof buf, in)) > 0;)
        bad = fwrite(buf, 1, n, out) != n;
    bad = bad || ferror(in) || fflush(out) || fsync(fileno(out)); // durable before a rename
    bad |= fclose(out) != 0;
    int e = errno;
    fclose(in);
    return bad ? kg_err(err, KG_EIO, "copy %s to %s: %s", src, dst, strerror(e)) : KG_OK;
}

const char *kg_version(void) { return KG_VERSION; }
const char *kg_commit(void) { return KG_COMMIT; }
