// test_cpu_pool.c — the CPU thread pool under stress: many short parallel loops back to back,
// with more threads than cores (so workers are preempted at every point of a hand-off), two
// task functions with different contexts taking turns, and each loop's context on the
// caller's stack. Every task must run exactly once, with its own loop's function and
// context, and none may still run after cpu_pool_run has returned.
//
// Usage: test_cpu_pool [loops]   (default 20,000,000 per pool size, about 10 s each on 2 cores:
// the old race showed up a few times in that many; KG_POOL_LOOPS overrides,
// the ThreadSanitizer build runs fewer)
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/cpu/pool.h"

#define MAX_TASKS 48

// One loop's context, on the caller's stack; the magic tells the two task functions' kinds
// apart (a task of one kind handed the other's context is a mixed-up hand-off).
typedef struct {
    uint32_t magic;
    size_t n;
    atomic_int returned; // set once cpu_pool_run returned: a task that sees it ran late
    atomic_int runs[MAX_TASKS];
} Job;

#define MAGIC_A 0xA11CE5u
#define MAGIC_B 0xB0B0B0u

static atomic_long g_late, g_mixed, g_out_of_range;

static void task_common(Job *j, uint32_t magic, size_t t) {
    if (j->magic != magic) atomic_fetch_add(&g_mixed, 1);
    if (atomic_load(&j->returned)) atomic_fetch_add(&g_late, 1);
    if (t >= j->n || t >= MAX_TASKS) {
        atomic_fetch_add(&g_out_of_range, 1);
        return;
    }
    atomic_fetch_add(&j->runs[t], 1);
}

static void task_a(void *ctx, size_t t, int thread) {
    (void)thread;
    task_common(ctx, MAGIC_A, t);
}

static void task_b(void *ctx, size_t t, int thread) {
    (void)thread;
    task_common(ctx, MAGIC_B, t);
}

// One loop of n tasks with a fresh context on this frame; returns how many tasks did not
// run exactly once.
static long one_loop(CpuPool *p, size_t n, int kind) {
    Job j = {.magic = kind ? MAGIC_B : MAGIC_A, .n = n};
    for (size_t t = 0; t < MAX_TASKS; t++)
        atomic_init(&j.runs[t], 0);
    atomic_init(&j.returned, 0);
    cpu_pool_run(p, kind ? task_b : task_a, &j, n);
    atomic_store(&j.returned, 1);
    long wrong = 0;
    for (size_t t = 0; t < n; t++)
        wrong += atomic_load(&j.runs[t]) != 1;
    return wrong;
}

int main(int argc, char **argv) {
    long loops = 20000000;
    const char *env = getenv("KG_POOL_LOOPS");
    if (argc > 1)
        loops = atol(argv[1]);
    else if (env)
        loops = atol(env);
    REQUIRE(loops > 0, "loops must be positive");
    const int sizes[] = {2, 3, 5}; // 5 threads on a 2-core machine: preemption everywhere
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        char err[256];
        CpuPool *p = cpu_pool_new(sizes[s], err);
        REQUIRE(p, "%s", err);
        uint64_t rng = 0x9E3779B97F4A7C15ull + (uint64_t)s;
        long wrong = 0;
        for (long i = 0; i < loops; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            // mostly a few tasks (the hand-off is the work), sometimes more than threads
            size_t n = 1 + (rng >> 40) % (i % 7 == 0 ? MAX_TASKS : 4);
            wrong += one_loop(p, n, (int)(i & 1));
        }
        printf("%d threads, %ld loops: %ld tasks not run exactly once, %ld late, %ld with the "
               "wrong context, %ld out of range\n",
               sizes[s], loops, wrong, atomic_load(&g_late), atomic_load(&g_mixed),
               atomic_load(&g_out_of_range));
        CHECK(wrong == 0);
        CHECK(atomic_load(&g_late) == 0);
        CHECK(atomic_load(&g_mixed) == 0);
        CHECK(atomic_load(&g_out_of_range) == 0);
        cpu_pool_free(p);
    }
    return check_report();
}
