// ckpt.h — checkpoints: a servable model directory (config.json + model.safetensors + the
// tokenizer file, what kogpt2d and `kogpt2 next` open as they are) plus the sidecar
// train_state.bin that makes --resume continue exactly.
//
// train_state.bin (little-endian): magic "KGTRAIN\0", u32 version, u32 0, then u64s: step
// (optimizer steps done), total steps, seed, AdamW t, B, T, ranks, grad-accum, n_params,
// the data position (epoch, shard, window), n_names; then n_names shard names of
// SHARD_NAME_MAX bytes (the epoch's visiting order); then AdamW's m and v (n_params floats
// each). The weights themselves are model.safetensors in f32, so a resumed run starts from
// bit-identical parameters and moments.
//
// Writing is crash-safe: everything goes to DIR.tmp, then DIR is renamed to DIR.old, DIR.tmp
// to DIR, and DIR.old is removed. A kill at any point leaves either DIR or DIR.old complete;
// ckpt_recover() puts DIR.old back when DIR is missing. One process at a time: the writer
// holds DIR.lock (ckpt_lock), or a second one would take the first one's DIR.tmp and DIR.old.
#ifndef TRAIN_CKPT_H
#define TRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "adamw.h"
#include "model/gpt2.h"
#include "shard.h"

#define CKPT_STATE_FILE "train_state.bin"
#define CKPT_ARGS_FILE  "train_args.json" // the run's arguments (train_args.c)
#define CKPT_VAL_FILE   "val.json"        // DIR.best's validation figures
#define CKPT_VERSION    1
// More micro-steps a step than a run ever takes (llm.c's GPT-2 runs take 8 to 32; a
// half-million-token batch at B = 1, T = 64 takes 8192): the bound on grad_accum read from
// train_state.bin and train_args.json, so that a damaged or edited file cannot make a resumed
// run's step never end.
#define CKPT_MAX_GRAD_ACCUM 65536

typedef struct {
    uint64_t step, total_steps, seed, adam_t;
    uint64_t B, T, ranks, grad_accum;
    uint64_t n_params;
    ShardPos pos;
    char (*names)[SHARD_NAME_MAX]; // owned (ckpt_state_free)
    size_t n_names;
} CkptState;

// Writes a checkpoint of m into dir (crash-safe, above): model.safetensors in dtype (KG_F32
// for a resumable checkpoint), config.json, a copy of the tokenizer file tok_file (may be
// NULL), and when st is not NULL train_state.bin with st and o's moments, which must be all
// of them (o->n == o->total: ZeRO-1 gathers its shards first; KG_EINVAL otherwise).
// KG_EIO etc. with err filled; dir is then untouched (the last good checkpoint stays).
int ckpt_save(const char *dir, const Gpt2 *m, KgDtype dtype, const char *tok_file,
              const CkptState *st, const AdamW *o, char *err);

// A small text file saved with a checkpoint (train_args.json, val.json).
typedef struct {
    const char *name; // a plain file name
    const char *text; // NUL-terminated
} CkptFile;

// ckpt_save plus n text files written into the same directory before it is published.
int ckpt_save_files(const char *dir, const Gpt2 *m, KgDtype dtype, const char *tok_file,
                    const CkptState *st, const AdamW *o, const CkptFile *files, size_t n,
                    char *err);

// --- a run's files beside its checkpoint directory DIR ---
// DIR.best/        the model with the lowest validation loss so far (a servable model with
//                  val.json: step, loss, bpb), saved as that validation finishes
// DIR.step-S/      an earlier checkpoint kept by --keep (resumable, as DIR)
// DIR.log.jsonl    the training log (train/trainlog.h)
// (and DIR.lock, DIR.tmp, DIR.old above). Each name is DIR's path plus the suffix.
#define CKPT_BEST_SUFFIX ".best"
#define CKPT_STEP_SUFFIX ".step-"
#define CKPT_LOG_SUFFIX  ".log.jsonl"

// path (cap bytes) = dir + suffix. 0, or -1 when it does not fit.
int ckpt_sibling(char *path, size_t cap, const char *dir, const char *suffix);

// Keeps the checkpoint dir holds now (step S, from its train_state.bin) as DIR.step-S before
// a save replaces it, then removes the oldest DIR.step-* so that keep - 1 remain: with the new
// DIR, the last keep checkpoints. The files are hard links (a checkpoint's files are never
// rewritten, a save replaces the directory), copies where the file system has none. keep <= 1,
// or no checkpoint in dir: only the removal. KG_OK or KG_EIO.
int ckpt_keep_prev(const char *dir, unsigned keep, char *err);

// Whether an earlier run left files beside dir (DIR.best, DIR.step-*, DIR.log.jsonl): 1 and
// the first one's name in first (cap bytes, may be NULL), else 0. A new run refuses them
// unless told to replace them (ckpt_remove_run_files).
int ckpt_run_files(const char *dir, char *first, size_t cap);
// Removes them. KG_OK or KG_EIO.
int ckpt_remove_run_files(const char *dir, char *err);

// Checks, before any work, that checkpoints can be written as dir (its parent exists and
// is writable): creates and removes dir's temporary sibling, which ckpt_recover has cleared.
// KG_OK or KG_EIO naming the path.
int ckpt_probe(const char *dir, char *err);

// Locks the checkpoint directory dir for this process, so that two runs never race on its
// DIR.tmp / DIR.old swap: an exclusive flock on the sibling file DIR.lock (beside DIR, as the
// swap replaces DIR itself), holding "PID WHO\n". Take it before ckpt_recover. KG_OK with *fd
// (close-on-exec; the kernel drops the lock when the process ends, kill -9 included);
// KG_EBUSY "DIR is in use by WHO pid N" when another process holds it; KG_EIO when DIR.lock
// cannot be created ("cannot write checkpoints to DIR: ...").
int ckpt_lock(const char *dir, const char *who, int *fd, char *err);
// Removes DIR.lock and releases it (fd < 0: nothing).
void ckpt_unlock(const char *dir, int fd);

// Repairs what a kill during ckpt_save can leave: DIR missing but DIR.old there -> rename
// back; a stale DIR.tmp -> removed. KG_OK when there is nothing to do.
int ckpt_recover(const char *dir, char *err);

// Whether dir holds a resumable checkpoint (train_state.bin present).
int ckpt_exists(const char *dir);

// What an output directory holds, for the checks before a run or an export. A save replaces
// the whole directory, so only the files a save writes may be there to be replaced (a model's
// or a checkpoint's: config.json, model.safetensors, the tokenizer file, train_state.bin,
// train_args.json, val.json); any other file belongs to someone else.
typedef enum {
    CKPT_DIR_EMPTY, // missing or empty: a new run loses nothing there
    CKPT_DIR_CKPT,  // train_state.bin: a resumable checkpoint (the run's own directory)
    CKPT_DIR_MODEL, // a model's files only (an export, a copied model): a save may replace it
    CKPT_DIR_OTHER  // a file no save writes (a user's, a data directory's shards): never replaced
} CkptDirKind;

// Classifies dir (after ckpt_recover); first (cap bytes, may be NULL) gets the name of a
// file in it: for CKPT_DIR_OTHER the first file that no save writes (the one in the way).
// KG_EINVAL when dir is not a directory or holds a subdirectory: a save swaps the whole
// directory and removes the old one's files, so it must be flat. KG_EIO.
int ckpt_dir_kind(const char *dir, CkptDirKind *kind, char *first, size_t cap, char *err);

// Reads dir/train_state.bin into st (names malloc'd: ckpt_state_free) and, when o is not
// NULL, the moments of o's range [o->lo, o->lo + o->n) into o (o->total must be st->n_params:
// adamw_init or adamw_init_shard first; o->t is set), so that a checkpoint written at any
// world size resumes at any other, with or without ZeRO-1. Everything is checked before it is used,
// the message naming the field: the file's size against n_names and n_params (no allocation
// before), B, T, ranks and grad_accum of at least 1, every shard name a train shard's file name
// (shard_name_ok: nothing outside the data directory), and the moments finite (v not negative).
// KG_EIO / KG_EFORMAT with err filled.
int ckpt_state_read(const char *dir, CkptState *st, AdamW *o, char *err);
void ckpt_state_free(CkptState *st);

// The tokenizer file to copy from path: path itself if a file, else in that directory
// tokenizer.json, then the first *.model / *.spiece. KG_EIO when none. out has cap bytes.
int ckpt_tokenizer_file(const char *path, char *out, size_t cap, char *err);

// Removes dir and the plain files in it (checkpoint directories are flat).
int ckpt_remove_dir(const char *dir, char *err);

#endif
