// replay_main.c — runs a fuzz target without libFuzzer, for the normal (gcc, ASan) builds:
// every file named on the command line, or found directly inside a directory named there,
// goes once through LLVMFuzzerTestOneInput, in name order. A path that does not exist is
// noted and skipped (a target may have no regression inputs yet). Exits 0 when every input
// ran (a crash aborts under the sanitizers), FUZZ_SKIP when the target's data is missing.
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

// Reads path whole into a malloc'd buffer of exactly *n bytes, so that a read past the
// input's end is an ASan error, as under libFuzzer. NULL on error (errno set).
static uint8_t *replay_read(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && (buf = malloc(sb.st_size ? (size_t)sb.st_size : 1))) {
        *n = fread(buf, 1, (size_t)sb.st_size, f);
        if (*n != (size_t)sb.st_size) {
            free(buf);
            buf = NULL;
            errno = EIO;
        }
    }
    fclose(f);
    return buf;
}

static int replay_file(const char *path) {
    size_t n = 0;
    uint8_t *buf = replay_read(path, &n);
    if (!buf) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int replay_name_cmp(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int replay_not_hidden(const struct dirent *d) { return d->d_name[0] != '.'; }

// Every regular file directly in dir; *count grows by the number replayed.
static int replay_dir(const char *dir, size_t *count) {
    struct dirent **names;
    int n = scandir(dir, &names, replay_not_hidden, replay_name_cmp), bad = 0;
    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat sb;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name) < sizeof path &&
            !stat(path, &sb) && S_ISREG(sb.st_mode)) {
            bad |= replay_file(path);
            ++*count;
        }
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    size_t count = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb)) {
            printf("replay: %s: absent, skipped\n", argv[i]);
        } else if (S_ISDIR(sb.st_mode)) {
            bad |= replay_dir(argv[i], &count);
        } else {
            bad |= replay_file(argv[i]);
            count++;
        }
    }
    printf("replay: %zu inputs%s\n", count, bad ? ", some unreadable" : "");
    return bad;
}
