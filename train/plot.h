// plot.h — `kogpt2-train plot`: the loss curves of a training log (trainlog.h) drawn into a
// PNG file, with no plotting library: the train loss of every logged step and the
// validation loss, by step, on a grid with labelled axes and a legend (a small built-in
// font). For a notebook, the same JSONL reads as pandas.read_json(path, lines=True).
#ifndef TRAIN_PLOT_H
#define TRAIN_PLOT_H

#include <stddef.h>

typedef struct {
    size_t train, val; // records drawn
} PlotCounts;

// Reads log_path's train and val records and writes the curves to png_path (width x height
// pixels, each 320..4096). A resumed run's records follow on in the same log; a record seen
// again for a step (a log from before resumes trimmed it) replaces the earlier one.
// KG_OK with *counts; KG_EIO, KG_EFORMAT (no train or val record: "no loss to plot"),
// KG_EINVAL (a size out of range), KG_ENOMEM, with err filled.
int plot_log(const char *log_path, const char *png_path, int width, int height, PlotCounts *counts,
             char *err);

#endif
