// hfcache.h — a model named by its Hugging Face repo id (ORG/NAME) found in the local hub
// cache, laid out as huggingface_hub writes it. Nothing is ever downloaded.
//
//   CACHE/models--ORG--NAME/refs/main          the commit hash of the branch (or refs/REV)
//   CACHE/models--ORG--NAME/snapshots/<hash>/  the files, as symlinks into ../../blobs/
//
// CACHE is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE (its older name), else $HF_HOME/hub,
// else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
#ifndef HFCACHE_H
#define HFCACHE_H

#include <stddef.h>

// Resolves a --model argument to a directory, written into dir (cap bytes):
//   - an existing directory, or anything that is not shaped ORG/NAME[@REV], as it is (so
//     gpt2_open reports a wrong path itself);
//   - otherwise ORG/NAME[@REV] in the cache: refs/REV (REV defaults to main; a commit hash
//     also names snapshots/<hash> directly) -> snapshots/<hash>.
// KG_OK, or KG_EIO when the repo or revision is not in the cache: err says where it looked
// and the command that downloads it. Thread-safe (reads the environment only).
int hfcache_resolve(const char *model, char *dir, size_t cap, char *err);

#endif
