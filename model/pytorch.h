// pytorch.h — reads a PyTorch checkpoint (pytorch_model.bin: torch.save's zip format, torch
// >= 1.6) into the tensor table safetensors.h defines, so the model code sees one interface.
//
// The file is a stored zip (zipfile.h) of DIR/data.pkl, a pickle of the state dict
// (pickle.h, never executed), and DIR/data/KEY, one entry per storage. Tensors point
// straight into the mapped storages when the view is contiguous and aligned (PyTorch aligns
// every entry to 64 bytes); a tied lm_head.weight is the same storage as wte, so both point
// at the same bytes. A view that is not contiguous (a transpose, a strided slice) is copied
// once into st->owned.
#ifndef PYTORCH_H
#define PYTORCH_H

#include <stddef.h>

#include "safetensors.h"

#define PYTORCH_MAX_PICKLE (16u << 20) // data.pkl bytes; a 1.5B model's is ~50 KB

// Parses a whole file image buf[0..size): the zip, the pickle, every tensor's storage (in
// the zip, its size as the pickle says) and view (inside its storage). On KG_OK st->tensors
// point into buf (which must outlive st) or into st->owned; st->map is left NULL. Otherwise
// KG_EFORMAT / KG_EUNSUP / KG_ENOMEM with one line in err, and st holds nothing to free.
int pytorch_parse(SafeTensors *st, const void *buf, size_t size, char *err);

// Maps path read-only and parses it; err starts with the path. KG_EIO if it cannot be
// opened or mapped. Close with safetensors_close().
int pytorch_open(SafeTensors *st, const char *path, char *err);

#endif
