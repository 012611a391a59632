// fuzz.h — what every fuzz target shares: the libFuzzer entry points, finding a data file
// (the source tree for in-repo files, KG_SHARED_DIR for ../shared), and skipping cleanly
// when a file is absent.
//
// Each fuzz_*.c defines LLVMFuzzerInitialize (one-time setup) and LLVMFuzzerTestOneInput
// (one input; everything it allocates is freed before it returns, so LeakSanitizer can hold
// it to that). The same file links either with libFuzzer (KG_FUZZ builds) or with
// replay_main.c, which feeds it the corpus and regression inputs once each.
#ifndef FUZZ_H
#define FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FUZZ_SKIP 77 // exit status of a target whose data file is missing (ctest's skip code)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// root/rel into out when the file is readable; root comes from env if set, else def (a
// path baked in at build time). Otherwise prints why and exits FUZZ_SKIP: a target without
// its data must say so, not pass.
static inline const char *fuzz_data_file(char *out, size_t cap, const char *env, const char *def,
                                         const char *rel, const char *target) {
    const char *root = getenv(env);
    if (!root || !*root) root = def;
    if ((size_t)snprintf(out, cap, "%s/%s", root, rel) < cap && !access(out, R_OK)) return out;
    fprintf(stderr, "%s: %s/%s is missing (set %s): skipped\n", target, root, rel, env);
    exit(FUZZ_SKIP);
}

// Aborts (a crash libFuzzer records, with the input) when an invariant does not hold.
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
