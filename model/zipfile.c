// zipfile.c — the central directory of a stored zip image (zipfile.h). Every offset and
// length read from the image is checked against what is left of it before it is used, in
// 64-bit arithmetic written as `len <= end - off`, which cannot overflow.
//
// Layout (APPNOTE.TXT): local header + name + extra + data, per entry; the central directory
// (one 46-byte record + name + extra + comment per entry); for ZIP64 a 56-byte end record
// and a 20-byte locator; the 22-byte end record and a comment of up to 65535 bytes.
#include "zipfile.h"

#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "base/le.h"

#define SIG_LOCAL     0x04034b50u
#define SIG_CENTRAL   0x02014b50u
#define SIG_END       0x06054b50u
#define SIG_END64     0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define LOCAL_SIZE    30u
#define CENTRAL_SIZE  46u
#define END_SIZE      22u
#define END64_SIZE    56u
#define LOCATOR_SIZE  20u
#define SATURATED32   0xffffffffu

// Where the central directory is and how many records it holds.
typedef struct {
    uint64_t n, cd_off, cd_size;
    uint64_t end; // offset of the first end record (ZIP64 or classic): the directory stops here
} ZipDir;

// The classic end record: the last 22 + comment bytes whose signature and comment length
// agree with the file's end.
static int find_end(const uint8_t *p, size_t size, size_t *at) {
    if (size < END_SIZE) return 0;
    size_t lo = size - END_SIZE > 65535 ? size - END_SIZE - 65535 : 0;
    for (size_t i = size - END_SIZE + 1; i-- > lo;)
        if (kg_get_le32(p + i) == SIG_END && i + END_SIZE + kg_get_le16(p + i + 20) == size) {
            *at = i;
            return 1;
        }
    return 0;
}

static int read_dir(ZipDir *d, const uint8_t *p, size_t size, char *err) {
    size_t e;
    if (!find_end(p, size, &e))
        return kg_err(err, KG_EFORMAT,
                      "zip: no end-of-central-directory record (%zu bytes): truncated or not a "
                      "zip file",
                      size);
    if (kg_get_le16(p + e + 4) || kg_get_le16(p + e + 6))
        return kg_err(err, KG_EFORMAT, "zip: a multi-disk (split) archive is not read");
    *d = (ZipDir){kg_get_le16(p + e + 10), kg_get_le32(p + e + 16), kg_get_le32(p + e + 12), e};
    // ZIP64: a locator right before the end record points at the 64-bit end record
    if (e >= LOCATOR_SIZE && kg_get_le32(p + e - LOCATOR_SIZE) == SIG_LOCATOR64) {
        const uint8_t *loc = p + e - LOCATOR_SIZE;
        uint64_t off = kg_get_le64(loc + 8);
        if (off > e - LOCATOR_SIZE || END64_SIZE > e - LOCATOR_SIZE - off ||
            kg_get_le32(p + off) != SIG_END64)
            return kg_err(err, KG_EFORMAT,
                          "zip: the ZIP64 end record is not where its locator "
                          "says: truncated or corrupt");
        const uint8_t *r = p + off;
        if (kg_get_le32(r + 16) || kg_get_le32(r + 20))
            return kg_err(err, KG_EFORMAT, "zip: a multi-disk (split) archive is not read");
        *d = (ZipDir){kg_get_le64(r + 32), kg_get_le64(r + 48), kg_get_le64(r + 40), off};
    } else if (d->n == 0xffff || d->cd_off == SATURATED32 || d->cd_size == SATURATED32) {
        return kg_err(err, KG_EFORMAT, "zip: ZIP64 fields without a ZIP64 end record");
    }
    if (d->n > ZIPFILE_MAX_ENTRIES)
        return kg_err(err, KG_EFORMAT,
                      "zip: %llu entries, more than the %d a checkpoint may have (a zip bomb?)",
                      (unsigned long long)d->n, ZIPFILE_MAX_ENTRIES);
    if (d->cd_off > d->end || d->cd_size > d->end - d->cd_off)
        return kg_err(err, KG_EFORMAT,
                      "zip: the central directory (%llu bytes at %llu) is outside the file: "
                      "truncated",
                      (unsigned long long)d->cd_size, (unsigned long long)d->cd_off);
    size_t cd_least; // the records alone, before their names
    if (kg_mul_overflow(d->n, CENTRAL_SIZE, &cd_least) || cd_least > d->cd_size)
        return kg_err(err, KG_EFORMAT,
                      "zip: %llu entries do not fit a central directory of %llu "
                      "bytes",
                      (unsigned long long)d->n, (unsigned long long)d->cd_size);
    return KG_OK;
}

// The ZIP64 extra field (id 1) holds, in this order, the 64-bit value of each of the
// uncompressed size, the compressed size and the local header offset that is saturated.
static int read_zip64_extra(const uint8_t *x, size_t len, uint64_t *usize, uint64_t *csize,
                            uint64_t *lho) {
    while (len >= 4) {
        uint32_t id = kg_get_le16(x), n = kg_get_le16(x + 2);
        if (n > len - 4) return -1;
        if (id == 1) {
            uint64_t *want[] = {usize, csize, lho};
            size_t at = 0;
            for (int i = 0; i < 3; i++) {
                if (*want[i] != SATURATED32) continue;
                if (at + 8 > n) return -1;
                *want[i] = kg_get_le64(x + 4 + at);
                at += 8;
            }
            return 0;
        }
        x += 4 + n;
        len -= 4 + n;
    }
    return 0;
}

// A name from the image, for a message (at most 80 bytes, odd bytes as '?').
static const char *show(const uint8_t *s, size_t n, char *out) {
    return kg_show(out, 81, (const char *)s, n);
}

// One central record at *at (advanced past it), checked with its local header.
static int read_entry(ZipEntry *ze, const uint8_t *p, const ZipDir *d, uint64_t *at,
                      uint64_t *local_off, char *err) {
    char nm[81];
    uint64_t cd_end = d->cd_off + d->cd_size;
    if (CENTRAL_SIZE > cd_end - *at || kg_get_le32(p + *at) != SIG_CENTRAL)
        return kg_err(err, KG_EFORMAT, "zip: central directory record %llu is corrupt",
                      (unsigned long long)(*at - d->cd_off));
    const uint8_t *c = p + *at;
    uint32_t flags = kg_get_le16(c + 8), method = kg_get_le16(c + 10);
    uint64_t csize = kg_get_le32(c + 20), usize = kg_get_le32(c + 24), lho = kg_get_le32(c + 42);
    uint32_t nlen = kg_get_le16(c + 28), xlen = kg_get_le16(c + 30), clen = kg_get_le16(c + 32);
    if ((uint64_t)nlen + xlen + clen > cd_end - *at - CENTRAL_SIZE)
        return kg_err(err, KG_EFORMAT, "zip: a central directory record runs past its end");
    const uint8_t *name = c + CENTRAL_SIZE;
    if (nlen == 0 || nlen > ZIPFILE_MAX_NAME || memchr(name, 0, nlen))
        return kg_err(err, KG_EFORMAT, "zip: an entry name is empty, too long or holds a NUL");
    if (read_zip64_extra(name + nlen, xlen, &usize, &csize, &lho))
        return kg_err(err, KG_EFORMAT, "zip: entry %s: a corrupt extra field",
                      show(name, nlen, nm));
    if (flags & 0x41)
        return kg_err(err, KG_EUNSUP, "zip: entry %s is encrypted", show(name, nlen, nm));
    if (method != 0)
        return kg_err(err, KG_EUNSUP,
                      "zip: entry %s is compressed (method %u%s): only stored entries are read, "
                      "as torch.save writes them; re-save the checkpoint with torch.save",
                      show(name, nlen, nm), method, method == 8 ? ", deflate" : "");
    if (csize != usize)
        return kg_err(err, KG_EFORMAT, "zip: entry %s is stored with two different sizes",
                      show(name, nlen, nm));
    // the local header, then the bytes, all before the central directory
    if (lho > d->cd_off || LOCAL_SIZE > d->cd_off - lho || kg_get_le32(p + lho) != SIG_LOCAL)
        return kg_err(err, KG_EFORMAT, "zip: entry %s: no local header at %llu: truncated",
                      show(name, nlen, nm), (unsigned long long)lho);
    const uint8_t *l = p + lho;
    uint64_t data = lho + LOCAL_SIZE + kg_get_le16(l + 26) + kg_get_le16(l + 28);
    if (kg_get_le16(l + 8) != 0 || kg_get_le16(l + 26) != nlen ||
        (uint64_t)nlen > d->cd_off - lho - LOCAL_SIZE || memcmp(l + LOCAL_SIZE, name, nlen))
        return kg_err(err, KG_EFORMAT,
                      "zip: entry %s: the local header disagrees with the "
                      "central directory",
                      show(name, nlen, nm));
    if (data > d->cd_off || usize > d->cd_off - data)
        return kg_err(err, KG_EFORMAT,
                      "zip: entry %s: %llu bytes at %llu run past the data (%llu bytes): "
                      "truncated",
                      show(name, nlen, nm), (unsigned long long)usize, (unsigned long long)data,
                      (unsigned long long)d->cd_off);
    *ze = (ZipEntry){(const char *)name, nlen, p + data, (size_t)usize};
    *local_off = lho;
    *at += CENTRAL_SIZE + nlen + xlen + clen;
    return KG_OK;
}

typedef struct {
    uint64_t begin, end; // local header .. last data byte + 1
} Span;

static int cmp_span(const void *a, const void *b) {
    const Span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int cmp_name(const void *a, const void *b) {
    const ZipEntry *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

// No two entries share bytes (their local headers included): overlapping entries are how
// zip bombs and ambiguous files are made.
static int check_spans(Span *s, size_t n, char *err) {
    qsort(s, n, sizeof *s, cmp_span);
    for (size_t i = 1; i < n; i++)
        if (s[i].begin < s[i - 1].end)
            return kg_err(err, KG_EFORMAT,
                          "zip: two entries overlap (at %llu and %llu): not a file torch.save "
                          "wrote",
                          (unsigned long long)s[i - 1].begin, (unsigned long long)s[i].begin);
    return KG_OK;
}

int zipfile_read(ZipFile *z, const void *buf, size_t size, char *err) {
    *z = (ZipFile){0};
    const uint8_t *p = buf;
    ZipDir d = {0};
    int rc = read_dir(&d, p, size, err);
    if (rc) return rc;
    Span *spans = calloc(d.n + 1, sizeof *spans);
    z->entries = calloc(d.n + 1, sizeof *z->entries);
    if (!spans || !z->entries) {
        rc = kg_err(err, KG_ENOMEM, "zip: out of memory for %llu entries", (unsigned long long)d.n);
        goto end;
    }
    uint64_t at = d.cd_off;
    for (z->n = 0; z->n < d.n; z->n++) {
        ZipEntry *ze = &z->entries[z->n];
        if ((rc = read_entry(ze, p, &d, &at, &spans[z->n].begin, err))) goto end;
        spans[z->n].end = (uint64_t)(ze->data - p) + ze->size;
    }
    if ((rc = check_spans(spans, z->n, err))) goto end;
    qsort(z->entries, z->n, sizeof *z->entries, cmp_name);
    for (size_t i = 1; i < z->n; i++)
        if (!cmp_name(&z->entries[i - 1], &z->entries[i])) {
            char nm[81];
            rc = kg_err(err, KG_EFORMAT, "zip: entry %s appears twice",
                        show((const uint8_t *)z->entries[i].name, z->entries[i].name_len, nm));
            goto end;
        }
end:
    free(spans);
    if (rc) zipfile_free(z);
    return rc;
}

const ZipEntry *zipfile_find(const ZipFile *z, const char *name, size_t len) {
    ZipEntry key = {.name = name, .name_len = len};
    return z->n ? bsearch(&key, z->entries, z->n, sizeof *z->entries, cmp_name) : NULL;
}

void zipfile_free(ZipFile *z) {
    free(z->entries);
    *z = (ZipFile){0};
}
