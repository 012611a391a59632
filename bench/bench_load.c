// bench_load — how long gpt2_open takes on each of some model directories, measured in
// turns in the same run (bench/bench_load.py writes a KoGPT2-base-shape model as
// pytorch_model.bin and as model.safetensors and runs this on both).
//
//   build/bench_load [--runs 7] DIR...
//
// Per directory: the median and best of `runs` opens of
//   - the format alone: safetensors_parse / pytorch_parse of the file already mapped (the
//     header JSON, or the zip's directory + the pickle + every view checked and pointed into
//     the mapping: what the format itself costs),
//   - the weights (wsrc_open_dir: map the files, prefaulted, and parse them), and
//   - the whole gpt2_open on the CPU backend (config, every shape checked, and the one pass
//     over every weight that refuses NaN/inf: that pass touches each page, so it is where the
//     page faults of a zero-copy load are paid),
// plus what was loaded (in place or copied). Figures only: nothing here passes or fails.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include "base/kg.h"
#include "model/gpt2.h"
#include "model/pytorch.h"
#include "model/wsrc.h"

#include "bench_util.h"

// Seconds of one parse of the directory's single weights file, mapped beforehand; -1 for a
// sharded directory.
static double parse_time(const char *dir, char *err) {
    char path[4096];
    WeightSrc w;
    if (wsrc_open_dir(&w, dir, err)) return -1;
    int pytorch = strstr(w.path, ".bin") != NULL,
        single = w.n_files == 1 && !strstr(w.path, ".index.json");
    snprintf(path, sizeof path, "%s", w.path);
    wsrc_close(&w);
    void *map;
    size_t size;
    if (!single || kg_map_file(path, &map, &size, err)) return -1;
    SafeTensors st;
    double t0 = kg_now_s();
    int rc = pytorch ? pytorch_parse(&st, map, size, err) : safetensors_parse(&st, map, size, err);
    double t = kg_now_s() - t0;
    if (!rc) safetensors_close(&st);
    munmap(map, size);
    return rc ? -1 : t;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"runs", required_argument, 0, 'r'}, {0, 0, 0, 0}};
    int runs = 7, c;
    while ((c = getopt_long(argc, argv, "r:", opts, NULL)) != -1)
        if (c == 'r') runs = atoi(optarg);
    int n_dirs = argc - optind;
    if (n_dirs < 1 || runs < 1) {
        fprintf(stderr, "usage: bench_load [--runs N] DIR...\n");
        return 2;
    }
    char err[KG_ERRLEN];
    KgBackend *be = kg_cpu_backend_new(1, err);
    if (!be) {
        fprintf(stderr, "bench_load: %s\n", err);
        return 1;
    }
    double *t_parse = calloc((size_t)n_dirs * runs, sizeof *t_parse);
    double *t_src = calloc((size_t)n_dirs * runs, sizeof *t_src);
    double *t_open = calloc((size_t)n_dirs * runs, sizeof *t_open);
    char(*what)[KG_ERRLEN] = calloc((size_t)n_dirs, sizeof *what);
    if (!t_parse || !t_src || !t_open || !what) return 1;
    for (int r = 0; r < runs; r++) // in turns, so that both see the same machine
        for (int d = 0; d < n_dirs; d++) {
            const char *dir = argv[optind + d];
            t_parse[d * runs + r] = parse_time(dir, err);
            WeightSrc w;
            double t0 = kg_now_s();
            if (wsrc_open_dir(&w, dir, err)) {
                fprintf(stderr, "bench_load: %s\n", err);
                return 1;
            }
            t_src[d * runs + r] = kg_now_s() - t0;
            wsrc_close(&w);
            Gpt2 m;
            t0 = kg_now_s();
            if (gpt2_open(&m, dir, be, KG_DTYPE_AUTO, err)) {
                fprintf(stderr, "bench_load: %s\n", err);
                return 1;
            }
            t_open[d * runs + r] = kg_now_s() - t0;
            snprintf(what[d], KG_ERRLEN, "%s", m.src.what);
            gpt2_close(&m);
        }
    printf("%-36s %17s %17s %17s\n", "", "parse (ms)", "map + parse (ms)", "gpt2_open (ms)");
    printf("%-36s %8s %8s %8s %8s %8s %8s\n", "directory", "median", "best", "median", "best",
           "median", "best");
    for (int d = 0; d < n_dirs; d++) {
        qsort(t_parse + d * runs, (size_t)runs, sizeof *t_parse, bench_cmp_double);
        qsort(t_src + d * runs, (size_t)runs, sizeof *t_src, bench_cmp_double);
        qsort(t_open + d * runs, (size_t)runs, sizeof *t_open, bench_cmp_double);
        const char *dir = argv[optind + d], *tail = strlen(dir) > 36 ? dir + strlen(dir) - 36 : dir;
        printf("%-36s %8.3f %8.3f %8.2f %8.2f %8.1f %8.1f\n", tail,
               1e3 * t_parse[d * runs + runs / 2], 1e3 * t_parse[d * runs],
               1e3 * t_src[d * runs + runs / 2], 1e3 * t_src[d * runs],
               1e3 * t_open[d * runs + runs / 2], 1e3 * t_open[d * runs]);
        printf("    %s\n", what[d]);
    }
    free(t_parse);
    free(t_src);
    free(t_open);
    free(what);
    kg_backend_free(be);
    return 0;
}
