// check.h — the few assertions our ctest executables use. A failed CHECK prints the file,
// line and expression and counts a failure; a test's main() ends with `return check_report();`
// so ctest sees a non-zero exit when anything failed.
#ifndef TESTS_CHECK_H
#define TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

// Fails the test at once: for setup steps the rest of the test depends on.
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s: ", __FILE__, __LINE__, #cond);             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

// ctest treats exit code 77 as "skipped" (SKIP_RETURN_CODE 77 is set on such tests).
#define SKIP(...)                                                                                  \
    do {                                                                                           \
        printf("SKIP: ");                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        exit(77);                                                                                  \
    } while (0)

// Waits until cond holds (polled every millisecond, up to 60 s) for a state another thread
// reaches: the state is seen, never guessed from a sleep, and a sanitized build on a loaded
// 2-core machine (5-20x slower) still gets there. cond may refresh what it reads, e.g.
// WAIT_UNTIL((sched_gauges(s, &g), g.steps >= 2)); check cond after it.
#define WAIT_UNTIL(cond)                                                                           \
    for (int wait_ms_ = 0; !(cond) && wait_ms_ < 60000; wait_ms_++)                                \
    usleep(1000)

static inline int check_report(void) {
    printf("%d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
