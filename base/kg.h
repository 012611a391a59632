// kg.h — error codes, the error-message convention, checked sizes, file helpers and the
// monotonic clock, shared by every module (base/: below model/ and tokenizer/, depends on
// nothing).
//
// Library code never prints or exits. A function that can fail returns KG_OK (0) or a
// negative KG_E* code and writes one "what: why" line into the caller's buffer
// char err[KG_ERRLEN] (err may be NULL when the caller does not want the text).
#ifndef KG_H
#define KG_H

#include <stddef.h>

#define KG_ERRLEN 256

enum {
    KG_OK = 0,
    KG_EINVAL = -1,    // bad argument or bad input from a client (a user error)
    KG_EIO = -2,       // open/read/write/mmap failed
    KG_ENOMEM = -3,    // allocation failed
    KG_EFORMAT = -4,   // a file is malformed: JSON, header, shape, dtype, offsets
    KG_ERANGE = -5,    // a value is out of range: token id >= V, prompt longer than n_ctx
    KG_EUNSUP = -6,    // valid but unsupported (a dtype or option this build lacks)
    KG_EBUSY = -7,     // overloaded: queue full, out of cache memory
    KG_ECANCEL = -8,   // the work was cancelled (client went away, shutting down)
    KG_EINTERNAL = -9, // a bug or a backend failure
    KG_ENOTFOUND = -10 // a thing asked for by name does not exist (a model id)
};

// Writes the formatted message into err (if not NULL) and returns code, so callers can
// `return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));`.
int kg_err(char *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// Checked size arithmetic, for every size, count and offset computed from a file or a
// request: 1 when a * b (a + b) does not fit in size_t, else 0 with the result in *out.
//   if (kg_mul_overflow(n, esize, &nbytes)) return kg_err(err, KG_EFORMAT, "%s: too large", name);
static inline int kg_mul_overflow(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int kg_add_overflow(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out);
}

// Grows the malloc'd array *arrp (a pointer to the caller's T *, of *cap elements of elem
// bytes) so that it holds at least need elements: the capacity doubles from 16 (or from *cap)
// until need fits, so n one-at-a-time appends cost O(n) copies in all. KG_OK (nothing moves
// when need <= *cap); KG_ENOMEM when need * elem does not fit in size_t or realloc fails,
// with err filled and *arrp, its elements and *cap unchanged. The array may move: callers
// keep no pointers into it across a call. Not thread-safe on one array.
//   if (KG_GROW(ids, &cap, n + 1, err)) return KG_ENOMEM;
//   ids[n++] = id;
int kg_grow(void *arrp, size_t *cap, size_t need, size_t elem, char *err);
// kg_grow with the element size taken from the array's own type.
#define KG_GROW(arr, cap, need, err) kg_grow(&(arr), (cap), (need), sizeof *(arr), (err))

// This build's version ("0.3.0") and the commit it was configured at ("1a2b3c4d5e6f", or
// "unknown" outside a git checkout): for --version and the build_info metric.
const char *kg_version(void);
const char *kg_commit(void);

// The directory of the running program (/proc/self/exe, links resolved: build/ in a build
// tree, PREFIX/bin installed) into buf. KG_OK, or KG_EIO with err filled (no /proc, or the
// path does not fit in cap bytes).
int kg_exe_dir(char *buf, size_t cap, char *err);

// Finds one of the project's data directories (rel: "web", "models/default") for a program:
// beside its binary (build/kogpt2d -> build/web), one level up (-> web/), in an installed
// share/kogpt2/ next to bin/, or in the source tree it was built from. Writes the path into
// buf and returns buf, or NULL when there is none.
char *kg_find_data_dir(const char *rel, char *buf, size_t cap);

// Seconds on the monotonic clock (CLOCK_MONOTONIC: never jumps with the wall clock), for every
// duration, deadline and rate; never a date. kg_now_ms in milliseconds. Thread safe.
double kg_now_s(void);
static inline double kg_now_ms(void) { return kg_now_s() * 1e3; }

// Whether the string s ends with suffix (file extensions: ".bin", ".gz", ".model").
int kg_ends_with(const char *s, const char *suffix);

// dir + "/" + name into out (cap bytes). 0, or -1 (and out empty) when it does not fit.
int kg_path_join(char *out, size_t cap, const char *dir, const char *name);

// Opens path for reading only if it is a regular file: a FIFO, a device or a directory is
// refused at once with "PATH: not a regular file" (opening a FIFO to read would wait for a
// writer forever). KG_OK with *fd (blocking, close-on-exec) and, when size is not NULL, the
// file's size; KG_EIO or KG_EFORMAT.
int kg_open_regular(const char *path, int *fd, size_t *size, char *err);

// Maps the regular file at path read-only, whole and prefaulted (kg_open_regular's checks
// first). KG_OK
// with *map and *size (unmap with munmap(*map, *size)); an empty file is KG_EFORMAT
// ("PATH: an empty file"); KG_EIO when it cannot be opened or mapped.
int kg_map_file(const char *path, void **map, size_t *size, char *err);

// Tells the kernel that the pages wholly inside [p, p + bytes) of a read-only file mapping
// (kg_map_file's) are not needed now: they leave the process's resident memory, and are read
// from the file again if touched later. For weights converted into memory of their own (a
// quantized copy, a GPU's): without it their source pages, all read once at load, would stay
// resident for the daemon's life. Nothing happens to a range shorter than a page.
void kg_drop_pages(const void *p, size_t bytes);

// Reads a whole regular file of at most max bytes into a malloc'd, NUL-terminated *out
// (*len bytes, may be NULL). KG_EIO, KG_EFORMAT (over max: "not a ... file"), KG_ENOMEM.
int kg_read_file(const char *path, size_t max, char **out, size_t *len, char *err);

// Copies the regular file src to dst (created or truncated, mode 0644) and fsyncs dst, so a
// rename that follows publishes whole bytes. KG_EIO or KG_EFORMAT (src not a regular file)
// with err filled; dst may then be partial (callers copy to a temporary name).
int kg_copy_file(const char *src, const char *dst, char *err);

// 1 when path names a directory (a symbolic link to one too), else 0 (also for "").
int kg_is_dir(const char *path);

// A name read from a file, made safe for a one-line message: s[0..n) cut to cap - 1 bytes,
// every byte outside printable ASCII (a newline, a control byte) as '?'. Returns out.
const char *kg_show(char *out, size_t cap, const char *s, size_t n);

#endif
