// pickle.h — reads the data.pkl of a PyTorch checkpoint: a pickle of one dict of tensors
// (a state dict), and nothing else.
//
// Python's unpickler runs whatever the file names (a __reduce__ to os.system is the classic
// attack). This reader is not an unpickler: it knows the handful of opcodes torch.save emits
// for a dict of tensors and builds plain records from them. A GLOBAL is only a name looked up
// in a fixed allowlist (collections.OrderedDict, torch._utils._rebuild_tensor_v2 and
// _rebuild_parameter, the storage classes), and a REDUCE only "calls" one of those by
// building a record; no code is loaded or run. Any other opcode, any other global, any
// argument of the wrong shape is refused with one line naming what was found. Memory and
// nesting are bounded by the limits below and by the pickle's size.
#ifndef PICKLE_H
#define PICKLE_H

#include <stddef.h>

#include "safetensors.h" // KgDtype

#define PICKLE_MAX_DIMS  8
#define PICKLE_MAX_NODES (1u << 20) // values built; a state dict needs ~30 per tensor
#define PICKLE_MAX_STACK (1u << 18) // values on the stack at once
#define PICKLE_MAX_MARKS 64         // nesting depth
#define PICKLE_MAX_MEMO  (1u << 20) // memo slots

// One storage a tensor views: the zip entry data/<key> holding numel elements.
typedef struct {
    const char *key; // in the pickle bytes, not NUL-terminated
    size_t key_len;
    KgDtype dtype;          // KG_DTYPE_OTHER for a storage we read but never compute on
    const char *dtype_name; // "F32", "BOOL", ... as safetensors names them
    size_t elem_size;       // bytes
    size_t numel;           // elements, as the pickle says
} PickleStorage;

// One entry of the state dict: elements storage[offset + sum(i_d * stride[d])].
typedef struct {
    const char *name; // the dict key, in the pickle bytes, not NUL-terminated
    size_t name_len;
    size_t storage; // index into PickleDict.storages
    size_t offset;  // in elements
    int ndim;
    size_t shape[PICKLE_MAX_DIMS];
    size_t stride[PICKLE_MAX_DIMS]; // in elements
} PickleTensor;

typedef struct {
    PickleTensor *tensors; // in the dict's order
    size_t n_tensors;
    PickleStorage *storages;
    size_t n_storages;
} PickleDict;

// Reads the pickle buf[0..size): a dict (or OrderedDict) from string keys to tensors. On
// KG_OK d's names and keys point into buf (which must outlive d); free d with pickle_free().
// Otherwise KG_EFORMAT (or KG_ENOMEM) with one line in err ("pickle: global posix.system is
// not allowed ..."), and d holds nothing to free. Storage keys are not looked up here: the
// caller checks them against its zip.
int pickle_read_state_dict(PickleDict *d, const void *buf, size_t size, char *err);

void pickle_free(PickleDict *d);

#endif
