// prepare.c — `kogpt2-train prepare`: text, CSV/TSV and gzip corpora through the tokenizer
// into token shards (prepare.h), and the same document reader for validation text and eval.
// The shard format and its reader: shard.h, shard.c.
#include "prepare.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/buf.h"
#include "base/kg.h"
#include "base/le.h"
#include "base/progress.h"

// prepare's progress line looks at the input's position once per this many bytes read
#define PREP_PROGRESS_BYTES ((uint64_t)1 << 18)

// ---------------------------------------------------------------------------------------
// Writing shards

typedef struct {
    const char *dir;
    const char *prefix; // "train_" or "val_"
    int next_index;     // number of the next shard file
    int written;        // shards completed
    uint32_t dtype_size;
    uint64_t vocab_size;
    FILE *f;
    char tmp_path[4096];
    ShardHeader h;
    int keep_text; // also write the documents' text, one per line, to NAME.txt (validation:
    FILE *text;    // its size is text_bytes, the bits-per-byte denominator; xz -9 it to compare)
} ShardWriter;

static void header_encode(unsigned char *buf, const ShardHeader *h) {
    memset(buf, 0, SHARD_HEADER_SIZE);
    memcpy(buf, SHARD_MAGIC, 8);
    kg_put_le32(buf + 8, h->version);
    kg_put_le32(buf + 12, h->dtype_size);
    kg_put_le64(buf + 16, h->vocab_size);
    kg_put_le64(buf + 24, h->n_tokens);
    kg_put_le64(buf + 32, h->n_docs);
    kg_put_le64(buf + 40, h->text_bytes);
}

// Next free number after the n existing prefix*.bin shards (shard_list's names).
static int next_shard_index(char (*names)[SHARD_NAME_MAX], size_t n, const char *prefix) {
    int next = 0;
    for (size_t i = 0; i < n; i++) {
        int k = atoi(names[i] + strlen(prefix));
        if (k + 1 > next) next = k + 1;
    }
    return next;
}

// path (cap bytes) = DIR/PREFIXNNNNNN.ext: w's shard number k, or its text, or their .tmp.
static void writer_path(char *path, size_t cap, const ShardWriter *w, int k, const char *ext) {
    snprintf(path, cap, "%s/%s%06d.%s", w->dir, w->prefix, k, ext);
}

static int writer_begin(ShardWriter *w, char *err) {
    writer_path(w->tmp_path, sizeof w->tmp_path, w, w->next_index, "bin.tmp");
    w->f = fopen(w->tmp_path, "wb");
    if (!w->f) return kg_err(err, KG_EIO, "open %s: %s", w->tmp_path, strerror(errno));
    if (w->keep_text) {
        char path[4096];
        writer_path(path, sizeof path, w, w->next_index, "txt.tmp");
        if (!(w->text = fopen(path, "wb")))
            return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    }
    w->h = (ShardHeader){
        .version = SHARD_VERSION, .dtype_size = w->dtype_size, .vocab_size = w->vocab_size};
    unsigned char hdr[SHARD_HEADER_SIZE];
    header_encode(hdr, &w->h);
    if (fwrite(hdr, 1, sizeof hdr, w->f) != sizeof hdr)
        return kg_err(err, KG_EIO, "write %s: %s", w->tmp_path, strerror(errno));
    return KG_OK;
}

// Patches the header, closes and renames NAME.tmp to NAME. A shard with no tokens is dropped.
static int writer_end(ShardWriter *w, char *err) {
    if (!w->f) return KG_OK;
    unsigned char hdr[SHARD_HEADER_SIZE];
    header_encode(hdr, &w->h);
    int bad = fseek(w->f, 0, SEEK_SET) || fwrite(hdr, 1, sizeof hdr, w->f) != sizeof hdr;
    bad |= fflush(w->f) || fsync(fileno(w->f));
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    char text_tmp[4096], text_path[4096];
    size_t stem = strlen(w->tmp_path) - 8; // without ".bin.tmp"
    snprintf(text_tmp, sizeof text_tmp, "%.*s.txt.tmp", (int)stem, w->tmp_path);
    snprintf(text_path, sizeof text_path, "%.*s.txt", (int)stem, w->tmp_path);
    if (w->text) {
        bad |= fflush(w->text) || fsync(fileno(w->text));
        bad |= fclose(w->text) != 0;
        w->text = NULL;
    }
    if (bad) return kg_err(err, KG_EIO, "write %s: %s", w->tmp_path, strerror(errno));
    if (w->h.n_tokens == 0) {
        unlink(w->tmp_path);
        if (w->keep_text) unlink(text_tmp);
        return KG_OK;
    }
    char final_path[4096];
    snprintf(final_path, sizeof final_path, "%.*s", (int)(strlen(w->tmp_path) - 4), w->tmp_path);
    if (w->keep_text && rename(text_tmp, text_path))
        return kg_err(err, KG_EIO, "rename %s: %s", text_tmp, strerror(errno));
    if (rename(w->tmp_path, final_path))
        return kg_err(err, KG_EIO, "rename %s: %s", w->tmp_path, strerror(errno));
    w->next_index++;
    w->written++;
    return KG_OK;
}

// Appends one document's ids and its EOS (and its text and a newline when keep_text).
static int writer_doc(ShardWriter *w, const int *ids, size_t n, int eos, const char *text,
                      size_t bytes, char *err) {
    if (!w->f) {
        int rc = writer_begin(w, err);
        if (rc) return rc;
    }
    unsigned char buf[4096];
    size_t fill = 0;
    for (size_t i = 0; i <= n; i++) {
        uint32_t id = (uint32_t)(i < n ? ids[i] : eos);
        if (w->dtype_size == 2) {
            buf[fill++] = (unsigned char)id;
            buf[fill++] = (unsigned char)(id >> 8);
        } else {
            kg_put_le32(buf + fill, id);
            fill += 4;
        }
        if (fill == sizeof buf || i == n) {
            if (fwrite(buf, 1, fill, w->f) != fill)
                return kg_err(err, KG_EIO, "write %s: %s", w->tmp_path, strerror(errno));
            fill = 0;
        }
    }
    if (w->text && (fwrite(text, 1, bytes, w->text) != bytes || fputc('\n', w->text) == EOF))
        return kg_err(err, KG_EIO, "write %s text: %s", w->tmp_path, strerror(errno));
    w->h.n_tokens += n + 1;
    w->h.n_docs++;
    w->h.text_bytes += bytes + 1;
    return KG_OK;
}

// ---------------------------------------------------------------------------------------
// Reading text: lines, CSV records, document text

typedef struct {
    gzFile gz;
    KgBuf rec;                 // the current line or record (may hold NULs of its own)
    size_t max;                // longest record kept; rec holds at most max + 1 bytes and a NUL
    int too_long;              // the record passed max: rec holds only its start
    uint64_t skipped;          // bytes of the record read past, not held
    int quote_odd;             // CSV: an odd number of '"' so far in the record (held or not)
    unsigned char in[1 << 16]; // read ahead from gz: in[pos..end) not yet consumed
    size_t pos, end;
    int first;     // no line read yet (a UTF-8 BOM is dropped)
    uint64_t line; // physical lines read so far
} LineReader;

// Starts a new record (read_line_append appends its lines).
static void line_reset(LineReader *r) {
    r->rec.len = 0;
    r->too_long = 0;
    r->skipped = 0;
    r->quote_odd = 0;
}

static int count_quotes(const unsigned char *p, size_t n) {
    int odd = 0;
    for (const unsigned char *q = p; (q = memchr(q, '"', n - (size_t)(q - p))); q++)
        odd ^= 1;
    return odd;
}

// Appends the next physical line (without its newline) to r->rec. 0 at end of file, -1 on
// OOM; a read error ends the file (the caller asks gzerror). gzread and memchr rather than
// gzgets: a NUL byte must not end a line early (binary input is detected, not cut). Past
// r->max bytes the record is only scanned to its newline (r->too_long): memory stays bounded
// by the limit, not by the input (/dev/zero through a pipe is one endless line).
static int read_line_append(LineReader *r) {
    size_t start = r->rec.len, keep_max = r->max + 1; // + 1: a '\r' to strip may follow max bytes
    int got = 0, nl = 0, past = 0;
    while (!nl) {
        if (r->pos == r->end) {
            int n = gzread(r->gz, r->in, sizeof r->in);
            if (n <= 0) break;
            r->pos = 0;
            r->end = (size_t)n;
        }
        const unsigned char *p = r->in + r->pos, *q = memchr(p, '\n', r->end - r->pos);
        size_t take = q ? (size_t)(q - p) : r->end - r->pos;
        size_t keep = r->rec.len >= keep_max         ? 0
                      : take < keep_max - r->rec.len ? take
                                                     : keep_max - r->rec.len;
        r->quote_odd ^= count_quotes(p, take);
        if (buf_append(&r->rec, p, keep)) return -1;
        r->skipped += take - keep;
        past |= keep < take;
        r->pos += take + (q != NULL);
        got = 1;
        nl = q != NULL;
    }
    if (buf_reserve(&r->rec, 0)) return -1;
    r->rec.p[r->rec.len] = 0;
    if (!got) return 0;
    r->line++;
    if (!past && r->rec.len > start && r->rec.p[r->rec.len - 1] == '\r') r->rec.p[--r->rec.len] = 0;
    if (r->first && r->rec.len - start >= 3 && !memcmp(r->rec.p + start, "\xEF\xBB\xBF", 3)) {
        memmove(r->rec.p + start, r->rec.p + start + 3, r->rec.len - start - 3 + 1);
        r->rec.len -= 3;
    }
    r->first = 0;
    r->too_long |= past || r->rec.len > r->max;
    return 1;
}

static int has_non_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 1;
    return 0;
}

// Reduces a TSV/CSV record in place to its non-ASCII fields joined by '\n' (CSV quotes
// removed, "" unescaped). Returns the new length.
static size_t record_text(char *rec, size_t len, int csv) {
    size_t out = 0, i = 0;
    char sep = csv ? ',' : '\t';
    while (i <= len) {
        size_t fstart = out; // fields are copied down in place: out <= i always
        if (csv && i < len && rec[i] == '"') {
            i++;
            while (i < len) {
                if (rec[i] == '"' && i + 1 < len && rec[i + 1] == '"') {
                    rec[out++] = '"';
                    i += 2;
                } else if (rec[i] == '"') {
                    i++;
                    break;
                } else {
                    rec[out++] = rec[i++];
                }
            }
        }
        while (i < len && rec[i] != sep)
            rec[out++] = rec[i++];
        i++; // the separator (or the end)
        if (!has_non_ascii(rec + fstart, out - fstart)) {
            out = fstart; // an id, a label, a date: not text
        } else {
            rec[out++] = '\n';
        }
    }
    while (out > 0 && rec[out - 1] == '\n')
        out--;
    rec[out] = 0;
    return out;
}

// ---------------------------------------------------------------------------------------
// prepare

typedef struct {
    const Tokenizer *tok;
    int eos;
    uint64_t val_every, shard_tokens;
    ShardWriter train, val;
    ShardPrepareStats st;
    ShardDocFn doc_fn; // where each document goes: prep_write_doc (shards) or a reader's
    void *doc_ctx;
    int eval;          // reading for evaluation: SHARD_NEVER_TRAIN is allowed
    int counting;      // the walk only adds up the inputs' sizes (for the progress total)
    uint64_t total;    // the inputs' bytes (0: unknown, a pipe among them)
    int total_unknown; // a pipe was found while counting
    uint64_t done;     // bytes of the files finished, for the progress line
    KgProgress pr;
} Prep;

// Counts a dropped line in *count and remembers where the first one was.
static void prep_drop(Prep *p, uint64_t *count, const char *path, uint64_t line) {
    (*count)++;
    if (!p->st.first_dropped[0])
        snprintf(p->st.first_dropped, sizeof p->st.first_dropped, "%s:%llu", path,
                 (unsigned long long)line);
}

// prepare's ShardDocFn: document k (p->st.docs counts it already) to its shard.
static int prep_write_doc(void *ctx, const int *ids, size_t n, const char *text, size_t len,
                          char *err) {
    Prep *p = ctx;
    uint64_t k = p->st.docs - 1;
    int to_val = p->val_every && k % p->val_every == p->val_every - 1;
    ShardWriter *w = to_val ? &p->val : &p->train;
    int rc = writer_doc(w, ids, n, p->eos, text, len, err);
    if (rc) return rc;
    if (to_val) {
        p->st.val_docs++;
        p->st.val_tokens += n + 1;
    } else {
        p->st.train_tokens += n + 1;
        if (w->h.n_tokens >= p->shard_tokens) return writer_end(w, err);
    }
    return KG_OK;
}

// Tokenizes one document and hands it on; *bad_utf8 = 1 when it was dropped for invalid UTF-8.
static int prep_doc(Prep *p, const char *text, size_t len, int *bad_utf8, char *err) {
    *bad_utf8 = 0;
    if (len == 0) return KG_OK;
    int *ids = NULL;
    size_t n = 0;
    int rc = tok_encode(p->tok, text, len, &ids, &n, err);
    if (rc == KG_EINVAL) *bad_utf8 = 1; // tok_encode's only user error: dropped and counted
    if (rc) return rc == KG_EINVAL ? KG_OK : rc;
    p->st.docs++;
    rc = p->doc_fn(p->doc_ctx, ids, n, text, len, err);
    free(ids);
    return rc;
}

// The progress line: the files done plus this one's position (a .gz file's compressed
// offset; a pipe, which has none, its bytes read).
static void prep_progress(Prep *p, gzFile gz, uint64_t file_bytes) {
    z_off_t off = gzoffset(gz);
    progress_update(&p->pr, p->done + (off >= 0 ? (uint64_t)off : file_bytes));
}

static int prep_file(Prep *p, const char *path, char *err) {
    char base[4096];
    snprintf(base, sizeof base, "%s", path);
    if (kg_ends_with(base, ".gz")) base[strlen(base) - 3] = 0;
    int csv = kg_ends_with(base, ".csv"), tsv = kg_ends_with(base, ".tsv");
    LineReader r = {.gz = gzopen(path, "rb"), .max = p->st.max_line_bytes, .first = 1};
    if (!r.gz) return kg_err(err, KG_EIO, "open %s: %s", path, strerror(errno));
    gzbuffer(r.gz, 1 << 17);
    int rc = KG_OK, got, bad_utf8;
    uint64_t bytes0 = p->st.bytes_in, shown = 0; // this file's bytes: bytes_in - bytes0
    p->st.files++;
    for (;;) {
        if (p->st.bytes_in - bytes0 - shown >= PREP_PROGRESS_BYTES) { // one syscall per 256 KiB
            shown = p->st.bytes_in - bytes0;
            prep_progress(p, r.gz, shown);
        }
        line_reset(&r);
        got = read_line_append(&r);
        if (got <= 0) break;
        uint64_t line = r.line;      // where the record starts
        while (csv && r.quote_odd) { // a quoted field spans lines
            if (r.rec.len <= r.max && buf_append(&r.rec, "\n", 1)) {
                got = -1;
                break;
            }
            if ((got = read_line_append(&r)) <= 0) break;
        }
        if (got < 0) break;
        p->st.bytes_in += r.rec.len + r.skipped + 1;
        if (r.too_long) { // read past, not held: a limit on memory, not on the corpus
            prep_drop(p, &p->st.dropped_long, path, line);
            continue;
        }
        if (memchr(r.rec.p, 0, r.rec.len)) { // binary, not text (a NUL is no character of a corpus)
            prep_drop(p, &p->st.dropped_nul, path, line);
            continue;
        }
        size_t len = (csv || tsv) ? record_text(r.rec.p, r.rec.len, csv) : r.rec.len;
        if ((rc = prep_doc(p, r.rec.p, len, &bad_utf8, err))) break;
        if (bad_utf8) prep_drop(p, &p->st.dropped_utf8, path, line);
    }
    int zerr = 0;
    const char *zmsg = gzerror(r.gz, &zerr);
    if (!rc && got < 0) rc = kg_err(err, KG_ENOMEM, "read %s: out of memory", path);
    if (!rc && zerr != Z_OK && zerr != Z_STREAM_END)
        rc = kg_err(err, KG_EIO, "read %s: %s", path, zmsg);
    z_off_t off = gzoffset(r.gz);
    p->done += off >= 0 ? (uint64_t)off : p->st.bytes_in - bytes0;
    progress_update(&p->pr, p->done);
    gzclose(r.gz);
    buf_free(&r.rec);
    return rc;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int text_ext(const char *name) {
    char base[1024];
    snprintf(base, sizeof base, "%s", name);
    if (kg_ends_with(base, ".gz")) base[strlen(base) - 3] = 0;
    return kg_ends_with(base, ".txt") || kg_ends_with(base, ".tsv") || kg_ends_with(base, ".csv");
}

// A file is read; a directory is walked in name order (only text extensions).
// While counting (p->counting), a file adds its size to p->total instead (a pipe: unknown).
static int prep_path(Prep *p, const char *path, int named, char *err) {
    if (!p->eval && strstr(path, SHARD_NEVER_TRAIN)) { // toxic comments: evaluation only
        if (named)
            return kg_err(err, KG_EINVAL, "%s: %s is never used for training", path,
                          SHARD_NEVER_TRAIN);
        return KG_OK;
    }
    struct stat sb;
    if (stat(path, &sb)) return kg_err(err, KG_EIO, "stat %s: %s", path, strerror(errno));
    // a named pipe is read (--input /dev/stdin, <(xzcat ...)); a device is no corpus
    // (/dev/zero never ends), and in a directory only regular files are (opening a FIFO there
    // would wait for a writer)
    if (named && !S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode) && !S_ISFIFO(sb.st_mode))
        return kg_err(err, KG_EINVAL,
                      "%s: not a file, a directory or a pipe (a device is no corpus)", path);
    if (S_ISREG(sb.st_mode) || S_ISFIFO(sb.st_mode)) {
        if (!named && !(S_ISREG(sb.st_mode) && text_ext(path))) return KG_OK;
        if (!p->counting) return prep_file(p, path, err);
        p->total += (uint64_t)sb.st_size;
        p->total_unknown |= S_ISFIFO(sb.st_mode);
        return KG_OK;
    }
    if (!S_ISDIR(sb.st_mode)) return KG_OK;
    DIR *d = opendir(path);
    if (!d) return kg_err(err, KG_EIO, "opendir %s: %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = KG_OK;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (KG_GROW(names, &cap, n + 1, NULL)) {
            rc = kg_err(err, KG_ENOMEM, "opendir %s: out of memory", path);
            break;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            rc = kg_err(err, KG_ENOMEM, "opendir %s: out of memory", path);
            break;
        }
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (!rc && n) qsort(names, n, sizeof *names, name_cmp); // (an empty directory: names NULL)
    for (size_t i = 0; i < n && !rc; i++)
        rc = prep_path(p, names[i], 0, err);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

void shard_prepare_dropped(const ShardPrepareStats *st, char *out, size_t cap) {
    uint64_t n = st->dropped_utf8 + st->dropped_nul + st->dropped_long;
    if (!n) {
        snprintf(out, cap, "%s", "");
        return;
    }
    snprintf(out, cap,
             "%llu line%s dropped (%llu not UTF-8, %llu with NUL bytes, %llu over %zu bytes), "
             "the first at %s",
             (unsigned long long)n, n == 1 ? "" : "s", (unsigned long long)st->dropped_utf8,
             (unsigned long long)st->dropped_nul, (unsigned long long)st->dropped_long,
             st->max_line_bytes, st->first_dropped);
}

// Removes the shards w wrote, numbers first..w->next_index-1 (their text, and the temporary
// files of one left unfinished), as a failed prepare must leave the directory as it was.
static void writer_remove_new(const ShardWriter *w, int first) {
    static const char *const ext[] = {"bin", "txt", "bin.tmp", "txt.tmp"};
    char path[4096];
    for (int k = first; k <= w->next_index; k++)
        for (size_t e = 0; e < sizeof ext / sizeof ext[0]; e++) {
            writer_path(path, sizeof path, w, k, ext[e]);
            unlink(path);
        }
}

// SHARD_REPLACE, once the new shards are complete: removes the n_old shards listed before
// (and their text), then numbers the new ones (first..) from 0 as a fresh prepare would.
static int writer_replace_old(const ShardWriter *w, char (*old)[SHARD_NAME_MAX], size_t n_old,
                              int first, char *err) {
    char from[4096], to[4096];
    for (size_t i = 0; i < n_old; i++) {
        kg_path_join(from, sizeof from, w->dir, old[i]);
        if (unlink(from) && errno != ENOENT)
            return kg_err(err, KG_EIO, "unlink %s: %s", from, strerror(errno));
        snprintf(from + strlen(from) - 4, 5, ".txt"); // "....bin" -> "....txt"
        unlink(from);
    }
    // ascending: target k is below every new index not yet moved, and the old are gone
    for (int k = 0; k < w->next_index - first; k++) {
        for (int txt = 0; txt < 2; txt++) {
            const char *ext = txt ? "txt" : "bin";
            writer_path(from, sizeof from, w, first + k, ext);
            writer_path(to, sizeof to, w, k, ext);
            if (rename(from, to) && !(txt && errno == ENOENT))
                return kg_err(err, KG_EIO, "rename %s: %s", from, strerror(errno));
        }
    }
    return KG_OK;
}

// Reads every input in order into p->doc_fn, with a progress line on progress (NULL: none)
// whose total is the inputs' size, found by a first walk that only counts.
static int prep_walk(Prep *p, const char *const *inputs, size_t n_inputs, FILE *progress,
                     const char *what, char *err) {
    int rc = KG_OK;
    if (progress) {
        p->counting = 1;
        for (size_t i = 0; i < n_inputs && !rc; i++)
            rc = prep_path(p, inputs[i], 1, err);
        p->counting = 0;
        if (rc) return rc;
    }
    progress_start(&p->pr, progress, what, p->total_unknown ? 0 : p->total, 10);
    for (size_t i = 0; i < n_inputs && !rc; i++)
        rc = prep_path(p, inputs[i], 1, err);
    if (!rc) progress_end(&p->pr, p->done);
    return rc;
}

// Why no document was left, as one line in err.
static int prep_none(const Prep *p, char *err) {
    char dropped[512];
    shard_prepare_dropped(&p->st, dropped, sizeof dropped);
    if (dropped[0]) return kg_err(err, KG_EINVAL, "no documents: %s", dropped);
    if (!p->st.files)
        return kg_err(err, KG_EINVAL, "no documents: no .txt/.tsv/.csv file in the inputs");
    return kg_err(err, KG_EINVAL, "no documents: %llu file%s without a non-empty line",
                  (unsigned long long)p->st.files, p->st.files == 1 ? "" : "s");
}

// Reads every input into p's writers and completes their last shards; KG_EINVAL when no
// document was left.
static int prep_inputs(Prep *p, const ShardPrepareArgs *args, char *err) {
    int rc = prep_walk(p, args->inputs, args->n_inputs, args->progress, "prepare", err);
    int rc2 = writer_end(&p->train, rc ? NULL : err);
    int rc3 = writer_end(&p->val, rc || rc2 ? NULL : err);
    if (p->train.f) fclose(p->train.f);
    if (p->val.f) fclose(p->val.f);
    if (p->val.text) fclose(p->val.text);
    rc = rc ? rc : rc2 ? rc2 : rc3;
    return !rc && !p->st.docs ? prep_none(p, err) : rc;
}

int shard_prepare(const Tokenizer *tok, const ShardPrepareArgs *args, ShardPrepareStats *stats,
                  char *err) {
    int eos = tok_special(tok).eos;
    if (eos < 0) return kg_err(err, KG_EINVAL, "prepare: the tokenizer has no EOS token");
    int created = !mkdir(args->out_dir, 0755);
    if (!created && errno != EEXIST)
        return kg_err(err, KG_EIO, "mkdir %s: %s", args->out_dir, strerror(errno));
    uint64_t V = tok_vocab_size(tok);
    Prep p = {.tok = tok,
              .eos = eos,
              .doc_fn = prep_write_doc,
              .val_every = args->val_every,
              .shard_tokens = args->shard_tokens ? args->shard_tokens : (1ull << 26),
              .st.max_line_bytes =
                  args->max_line_bytes ? args->max_line_bytes : SHARD_MAX_LINE_DEFAULT};
    ShardWriter w = {.dir = args->out_dir, .dtype_size = V <= 65536 ? 2 : 4, .vocab_size = V};
    p.train = p.val = w;
    p.doc_ctx = &p;
    p.train.prefix = "train_";
    p.val.prefix = "val_";
    p.val.keep_text = 1;
    char(*old_train)[SHARD_NAME_MAX] = NULL, (*old_val)[SHARD_NAME_MAX] = NULL;
    size_t n_old_train = 0, n_old_val = 0;
    int rc = shard_list(args->out_dir, "train_", &old_train, &n_old_train, err);
    if (!rc) rc = shard_list(args->out_dir, "val_", &old_val, &n_old_val, err);
    if (!rc && n_old_train + n_old_val && args->mode == SHARD_NEW)
        rc = kg_err(err, KG_EINVAL,
                    "%s holds shards already (%s ...): --append adds to them, --force replaces "
                    "them",
                    args->out_dir, n_old_train ? old_train[0] : old_val[0]);
    if (!rc) {
        // new shards are numbered after the old ones, also those that are to replace them
        const int first_train = next_shard_index(old_train, n_old_train, "train_");
        const int first_val = next_shard_index(old_val, n_old_val, "val_");
        p.train.next_index = first_train;
        p.val.next_index = first_val;
        rc = prep_inputs(&p, args, err);
        if (rc) { // nothing half-done stays: the directory holds what it held
            writer_remove_new(&p.train, first_train);
            writer_remove_new(&p.val, first_val);
        } else if (args->mode == SHARD_REPLACE &&
                   !(rc = writer_replace_old(&p.train, old_train, n_old_train, first_train, err)))
            rc = writer_replace_old(&p.val, old_val, n_old_val, first_val, err);
    }
    p.st.train_shards = p.train.written;
    p.st.val_shards = p.val.written;
    if (!rc && stats) *stats = p.st;
    free(old_train);
    free(old_val);
    if (rc && created) rmdir(args->out_dir); // ours, and empty again
    return rc;
}

int shard_read_docs(const Tokenizer *tok, const char *const *inputs, size_t n_inputs,
                    size_t max_line_bytes, ShardDocFn fn, void *ctx, FILE *progress,
                    ShardPrepareStats *stats, char *err) {
    Prep p = {.tok = tok,
              .eos = tok_special(tok).eos,
              .doc_fn = fn,
              .doc_ctx = ctx,
              .eval = 1,
              .st.max_line_bytes = max_line_bytes ? max_line_bytes : SHARD_MAX_LINE_DEFAULT};
    int rc = prep_walk(&p, inputs, n_inputs, progress, "read", err);
    if (!rc && !p.st.docs) rc = prep_none(&p, err);
    if (!rc && stats) *stats = p.st;
    return rc;
}
