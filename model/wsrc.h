// wsrc.h — a model directory's weights, whatever files hold them: model.safetensors, the
// shards an *.index.json lists, or pytorch_model.bin. Every file is mapped and checked by
// its own reader (safetensors.h, pytorch.h) into the same tensor table; lookups go over all
// of them, so the model code sees one source.
#ifndef WSRC_H
#define WSRC_H

#include <stddef.h>

#include "base/kg.h"
#include "safetensors.h"

#define WSRC_MAX_SHARDS  4096
#define WSRC_MAX_INDEX   (16u << 20) // bytes of an *.index.json
#define WSRC_MAX_ENTRIES (1u << 20)  // names in its weight_map

typedef struct {
    SafeTensors *files; // one per mapped file
    size_t n_files;
    char path[4096];      // what was opened: the weights file or the index
    char what[KG_ERRLEN]; // one line for the log: file, dtype, size, in place or copied
} WeightSrc;

// The weights of the model directory dir, by preference: model.safetensors, then
// model.safetensors.index.json, then pytorch_model.bin, then pytorch_model.bin.index.json
// (the first present is read; its errors are not papered over by another format). A
// directory with only TensorFlow or Flax weights is KG_EUNSUP saying how to convert them;
// none at all is KG_EIO naming what was looked for. Errors start with the file's path.
// Close with wsrc_close(); w holds nothing on error.
int wsrc_open_dir(WeightSrc *w, const char *dir, char *err);

// The tensor called name in any of the files, or NULL. Names are unique across files.
const StTensor *wsrc_find(const WeightSrc *w, const char *name);

// The resident pages of t's bytes in its file's mapping are given back (kg_drop_pages): for a
// tensor the model holds in memory of its own once loaded (converted, quantized, on a GPU).
// Read again, they come back from the file. A tensor copied out of its file at load (a
// PyTorch view that was not contiguous) is left alone.
void wsrc_drop_pages(const WeightSrc *w, const StTensor *t);

// Unmaps every file; w may be zeroed or half-built.
void wsrc_close(WeightSrc *w);

#endif
