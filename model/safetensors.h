// safetensors.h — reads a .safetensors file by memory-mapping it: an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}}, then the tensor bytes.
// Tensor data is used in place (never copied); every header field is validated first.
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/progress.h"
#include "dtype.h"

#define ST_MAX_DIMS   8
#define ST_MAX_HEADER (100u << 20) // the reference implementation's limit too

typedef struct {
    char *name;
    KgDtype dtype;
    char dtype_name[8]; // as written in the header ("F32", "I64", ...)
    size_t elem_size;   // bytes per element
    int ndim;
    size_t shape[ST_MAX_DIMS];
    size_t n_elems;
    size_t nbytes;
    const void *data; // inside the mapping, aligned to elem_size
} StTensor;

// A mapped tensor file: a .safetensors file, or a PyTorch checkpoint read into the same
// table (pytorch.h).
typedef struct {
    void *map;         // the whole file, read-only
    size_t map_size;   // bytes
    StTensor *tensors; // safetensors: sorted by data offset; PyTorch: in the state dict's order
    size_t n_tensors;
    void *owned;     // tensors that could not stay in the mapping (a PyTorch view that is not
                     // contiguous or not aligned), copied; NULL when every tensor is in place
    size_t n_copied; // how many tensors point into owned
    char **meta;     // __metadata__ as key, value, key, value, ..., NULL; NULL when absent
    size_t n_meta;   // pairs in meta
} SafeTensors;

// Parses and validates a whole file image buf[0..size): header length, JSON, dtypes, shapes,
// offsets inside the data and non-overlapping, alignment, unique names, and __metadata__ (an
// object of strings, as the format defines it; copied into st->meta). On KG_OK st->tensors
// point into buf (which must outlive st); st->map is left NULL. On error KG_EFORMAT (or
// KG_ENOMEM) with the tensor named in err, and st holds nothing to free.
int safetensors_parse(SafeTensors *st, const void *buf, size_t size, char *err);

// Parses a whole file image into st (safetensors_parse, pytorch_parse): on error st holds
// nothing to free and err has one line.
typedef int (*StParseFn)(SafeTensors *st, const void *buf, size_t size, char *err);

// Maps path read-only and parses it with parse; on KG_OK st owns the mapping, otherwise it is
// unmapped and err is "PATH: what parse said". KG_EIO / KG_EFORMAT if it cannot be opened or
// mapped (kg_map_file). Close with safetensors_close().
int safetensors_open_with(SafeTensors *st, const char *path, StParseFn parse, char *err);

// safetensors_open_with(st, path, safetensors_parse, err).
int safetensors_open(SafeTensors *st, const char *path, char *err);

// The tensor called name, or NULL.
const StTensor *safetensors_find(const SafeTensors *st, const char *name);

// The __metadata__ value of key (the first, should the header repeat it), or NULL.
const char *safetensors_meta(const SafeTensors *st, const char *key);

// Unmaps the file and frees the tensor table and any copies; st may be zeroed or half-built.
void safetensors_close(SafeTensors *st);

// The first name (in strcmp order) that two tensors of files[0..n_files) share, into *dup (a
// pointer into a table; NULL when every name is unique). KG_OK, or KG_ENOMEM (err is the
// caller's to write: it knows the file).
int safetensors_dup_name(const SafeTensors *files, size_t n_files, const char **dup);

// "F32" -> KG_F32 etc.; sizes for the names the format defines. 0 for an unknown name.
size_t safetensors_dtype_size(const char *name);

// One tensor to write: name, dtype, shape, and its bytes (kg_dtype_bytes of its elements).
// A q8_0/q4_0 tensor (OC, C) is written as U8 (OC, C / 32 * block bytes): its rows of blocks.
typedef struct {
    const char *name;
    KgDtype dtype;
    int ndim;
    size_t shape[ST_MAX_DIMS];
    const void *data;
} StWrite;

// Writes tensors to path with no gap between them (the format allows none), in the order
// given within each element size and the larger sizes first, so that after the header
// (padded to 8 bytes) every tensor is aligned to its element (a quantized one: 1 byte).
// KG_EIO on write failure (the file may then be partial: write to a temporary name and
// rename, as the trainer does).
int safetensors_save(const char *path, const StWrite *tensors, size_t n, char *err);
// As safetensors_save, with a __metadata__ object of string pairs: meta holds key, value,
// key, value, ..., NULL (meta itself may be NULL), and the bytes of weights written advanced
// on progress as they go (NULL: none).
int safetensors_save_meta(const char *path, const StWrite *tensors, size_t n,
                          const char *const *meta, KgProgress *progress, char *err);

#endif
