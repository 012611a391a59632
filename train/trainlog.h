// trainlog.h — the training log: one JSON object per line (JSONL) in CKPT_DIR.log.jsonl,
// beside the checkpoint directory (which every save replaces), for plots and dashboards
// (`kogpt2-train plot`, pandas.read_json(path, lines=True), jq). One record per logged step
// and per validation; a resumed run appends to it. Records:
//   {"type":"run","step":0,"steps":1000,"tokens_per_step":4096,"resumed":false,"time":1700000000}
//   {"type":"train","step":1,"loss":9.21,"lr":6e-05,"norm":1.93,"tokens":4096,
//    "tok_per_s":20481,"ms":200.0,"elapsed_s":0.2}
//   {"type":"val","step":0,"loss":9.25,"bpb":3.01,"tokens":65536,"bytes":220000,"best":true}
//   {"type":"end","step":1000,"tokens":4096000,"elapsed_s":201.5,"val_loss":2.1,"val_bpb":0.69,
//    "best_step":1000,"best_val_loss":2.1}
// step counts optimizer steps done: a train record's loss is that of step `step` (1-based),
// a val record scores the weights after `step` steps (0: before the first).
#ifndef TRAIN_TRAINLOG_H
#define TRAIN_TRAINLOG_H

#include <stdint.h>
#include <stdio.h>

// A record is a few hundred bytes: a longer line is no record of ours. Readers of the log
// (the trim below, `kogpt2-train plot`) keep at most this much of a line and skip longer
// ones, so their memory is bounded by it, not by the file.
#define TRAINLOG_MAX_LINE (64u << 10)

typedef struct {
    FILE *f; // NULL: a closed log (every call does nothing)
    char path[4096];
} TrainLog;

// Opens path to append. A new run (resume_step 0 and not resuming) starts it empty. A resumed
// run at resume_step first drops the records past that step, which an interrupted run wrote
// after its last checkpoint and the resumed one repeats (path.tmp, then a rename), and a
// torn last line; *val_logged (may be NULL) = whether a val record for resume_step remains.
// KG_OK or KG_EIO with err filled.
int trainlog_open(TrainLog *l, const char *path, int resuming, uint64_t resume_step,
                  int *val_logged, char *err);
void trainlog_close(TrainLog *l);

// One record each, flushed at once (a killed run leaves whole lines). A write error is
// remembered and returned by every later call: KG_EIO with err filled.
int trainlog_run(TrainLog *l, uint64_t step, uint64_t steps, double tokens_per_step, int resumed,
                 char *err);
int trainlog_train(TrainLog *l, uint64_t step, double loss, double lr, double norm, uint64_t tokens,
                   double tok_per_s, double ms, double elapsed_s, char *err);
int trainlog_val(TrainLog *l, uint64_t step, double loss, double bpb, uint64_t tokens,
                 uint64_t bytes, int best, char *err);
int trainlog_end(TrainLog *l, uint64_t step, uint64_t tokens, double elapsed_s, double val_loss,
                 double val_bpb, uint64_t best_step, double best_val_loss, char *err);

#endif
