// zipfile.h — the entries of a zip image whose entries are stored (not compressed), as
// PyTorch's torch.save writes them (pytorch_model.bin): a name and the bytes, in place.
//
// Our own reader rather than libzip or minizip: the weights must stay pointers into the
// mmap (zero-copy), and those libraries hand out an entry through a read-into-a-buffer
// stream; a stored entry needs no inflater; and the format for stored entries is small (the
// central directory, ZIP64 records for > 4 GiB, one local header per entry), so it is read
// here in full, bounded and checked, with no new dependency in the images.
#ifndef ZIPFILE_H
#define ZIPFILE_H

#include <stddef.h>
#include <stdint.h>

#define ZIPFILE_MAX_ENTRIES 65536 // a checkpoint has one entry per storage: hundreds
#define ZIPFILE_MAX_NAME    1024

typedef struct {
    const char *name; // in the image, not NUL-terminated
    size_t name_len;
    const uint8_t *data; // in the image
    size_t size;         // bytes
} ZipEntry;

typedef struct {
    ZipEntry *entries; // sorted by name, names unique
    size_t n;
} ZipFile;

// Reads the central directory of the image buf[0..size) (ZIP64 included) and checks every
// entry: stored (method 0, not encrypted), its local header and bytes inside the image
// before the central directory, the local name equal to the central one, no two entries'
// bytes overlapping, names unique, at most ZIPFILE_MAX_ENTRIES entries. On KG_OK z->entries
// point into buf (which must outlive z). Otherwise KG_EFORMAT (KG_EUNSUP for a compressed
// or encrypted entry, KG_ENOMEM) with one line in err, and z holds nothing to free.
int zipfile_read(ZipFile *z, const void *buf, size_t size, char *err);

// The entry called name[0..len), or NULL.
const ZipEntry *zipfile_find(const ZipFile *z, const char *name, size_t len);

void zipfile_free(ZipFile *z);

#endif
