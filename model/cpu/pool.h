// pool.h — the CPU backend's thread pool: n threads (the caller plus n-1 workers) run the
// tasks 0..n_tasks-1 of one parallel loop, taking them in order from a shared counter.
// Workers spin briefly between loops (a decode step dispatches ~100 loops of tens of
// microseconds each, too short to pay for a sleep/wake-up) and then sleep.
#ifndef CPU_POOL_H
#define CPU_POOL_H

#include <stddef.h>

typedef struct CpuPool CpuPool;

// fn(ctx, task, thread) for task in 0..n_tasks-1; tasks of one loop may run in any order and
// on any thread, so each must write only its own part of the output. thread (0 = the caller,
// 1..n-1 the workers) indexes per-thread scratch.
typedef void (*CpuTaskFn)(void *ctx, size_t task, int thread);

// NULL with err filled on failure. n_threads >= 1.
CpuPool *cpu_pool_new(int n_threads, char *err);
void cpu_pool_free(CpuPool *p);
int cpu_pool_threads(const CpuPool *p);

// Runs one parallel loop and returns when every task has finished. Callers on several
// threads take turns, one loop at a time; a task must not call cpu_pool_run itself.
void cpu_pool_run(CpuPool *p, CpuTaskFn fn, void *ctx, size_t n_tasks);

#endif
