#define _GNU_SOURCE // pthread_setname_np
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

// An idle worker polls for the next loop this long before it sleeps: a decode step runs
// ~100 loops a few microseconds apart, and a futex wake-up costs more than that.
#define POOL_SPIN_NS 300000
// Polls between yields of the core: when threads outnumber cores (other processes, a
// second model), the thread we wait for may need this core to make progress.
#define POOL_PAUSES_PER_YIELD 256
// The task count of a closed loop: no task index reaches it (n_tasks < POOL_CLOSED)
#define POOL_CLOSED UINT32_MAX

// The current loop is published in one 64-bit word: the loop's number in the high half and
// the next unclaimed task in the low half. A worker claims a task with a compare-and-swap
// that also checks the loop number, so a worker that wakes late can never take a task of
// a newer loop with the older loop's function. The caller waits for the tasks to be done,
// not for the workers to check in, so a worker the kernel has descheduled delays nothing
// (the caller runs its share).
//
// Between two loops the caller first closes the finished one (its task count becomes
// POOL_CLOSED), then writes the next loop's fn, ctx and n_tasks, then publishes its number.
// A worker that still holds the finished loop's word (all its tasks claimed) may read the
// new fn, ctx and n_tasks; without the close, its compare-and-swap on the old word would
// then succeed and run a task of the new loop twice (once more when the new loop opens),
// and its `done` would let the caller return while a task still runs. With the close, the
// release stores of fn/ctx/n_tasks order the close before them: a worker that saw any new
// value fails its compare-and-swap and reloads.
typedef struct CpuPool CpuPool;
typedef struct {
    CpuPool *pool;
    int thread;
} WorkerArg;

struct CpuPool {
    int n_threads;
    pthread_t *workers; // n_threads - 1
    WorkerArg *args;    // what each worker was started with
    _Atomic(CpuTaskFn) fn;
    _Atomic(void *) ctx;
    atomic_size_t n_tasks;
    atomic_uint_least64_t next; // loop << 32 | next task
    atomic_size_t done;         // tasks of the current loop finished
    atomic_int stop;
    pthread_mutex_t mutex; // only for sleeping workers
    pthread_cond_t wake;
    pthread_mutex_t run_mutex; // one loop at a time when several threads share the pool
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// Waits politely: a pause, and every POOL_PAUSES_PER_YIELD calls a yield of the core.
static inline void backoff(unsigned *i) {
    if (++*i % POOL_PAUSES_PER_YIELD == 0)
        sched_yield();
    else
        cpu_relax();
}

// Claims and runs tasks of loop `loop` until none is left (or a newer loop started).
static void run_tasks(CpuPool *p, uint32_t loop, int thread) {
    uint64_t v = atomic_load_explicit(&p->next, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(v >> 32) != loop) return;
        // acquire: if any of the three is the next loop's, so is the close before it, and the
        // compare-and-swap below fails
        CpuTaskFn fn = atomic_load_explicit(&p->fn, memory_order_acquire);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_acquire);
        size_t n = atomic_load_explicit(&p->n_tasks, memory_order_acquire);
        size_t task = (uint32_t)v;
        if (task >= n) return; // all claimed, or closed
        if (!atomic_compare_exchange_weak_explicit(&p->next, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;          // v now holds the current value
        fn(ctx, task, thread); // the CAS succeeded, so fn, ctx and n belong to this loop
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        v = atomic_load_explicit(&p->next, memory_order_acquire);
    }
}

// Waits until a loop newer than `seen` is published (or stop): spin first, then sleep.
static uint32_t wait_for_loop(CpuPool *p, uint32_t seen) {
    double spin_until = kg_now_s() + POOL_SPIN_NS * 1e-9;
    for (unsigned i = 0;;) {
        uint32_t loop = (uint32_t)(atomic_load_explicit(&p->next, memory_order_acquire) >> 32);
        if (loop != seen || atomic_load(&p->stop)) return loop;
        backoff(&i);
        if (i % 64 == 0 && kg_now_s() > spin_until) break;
    }
    pthread_mutex_lock(&p->mutex);
    uint32_t loop;
    while ((loop = (uint32_t)(atomic_load_explicit(&p->next, memory_order_acquire) >> 32)) ==
               seen &&
           !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->mutex);
    pthread_mutex_unlock(&p->mutex);
    return loop;
}

static void *worker_main(void *arg) {
    WorkerArg *w = arg;
    CpuPool *p = w->pool;
    uint32_t seen = 0;
    char name[16]; // named for top -H and /proc/PID/task/*/comm (bench_serving's shares)
    snprintf(name, sizeof name, "kg-pool-%d", w->thread);
    pthread_setname_np(pthread_self(), name);
    for (;;) {
        seen = wait_for_loop(p, seen);
        if (atomic_load(&p->stop)) return NULL;
        run_tasks(p, seen, w->thread);
    }
}

CpuPool *cpu_pool_new(int n_threads, char *err) {
    if (n_threads < 1) {
        kg_err(err, KG_EINVAL, "thread pool: need at least one thread");
        return NULL;
    }
    CpuPool *p = calloc(1, sizeof *p);
    if (!p) {
        kg_err(err, KG_ENOMEM, "thread pool: out of memory");
        return NULL;
    }
    p->n_threads = 1; // grows as workers start, so cpu_pool_free joins only those
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_mutex_init(&p->run_mutex, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    p->args = calloc((size_t)n_threads, sizeof *p->args);
    if (!p->workers || !p->args) {
        cpu_pool_free(p);
        kg_err(err, KG_ENOMEM, "thread pool: out of memory");
        return NULL;
    }
    for (int i = 0; i < n_threads - 1; i++) {
        p->args[i] = (WorkerArg){p, i + 1};
        int rc = pthread_create(&p->workers[i], NULL, worker_main, &p->args[i]);
        if (rc) {
            cpu_pool_free(p);
            kg_err(err, KG_ENOMEM, "thread pool: pthread_create: %s", strerror(rc));
            return NULL;
        }
        p->n_threads++;
    }
    return p;
}

void cpu_pool_free(CpuPool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mutex);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 0; i < p->n_threads - 1; i++)
        pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mutex);
    pthread_mutex_destroy(&p->run_mutex);
    free(p->workers);
    free(p->args);
    free(p);
}

int cpu_pool_threads(const CpuPool *p) { return p->n_threads; }

void cpu_pool_run(CpuPool *p, CpuTaskFn fn, void *ctx, size_t n_tasks) {
    if (n_tasks == 0) return;
    pthread_mutex_lock(&p->run_mutex); // thread 0's scratch is the caller's: one at a time
    // nothing to share (or more tasks than a loop word counts): skip the hand-off
    if (p->n_threads == 1 || n_tasks == 1 || n_tasks >= POOL_CLOSED) {
        for (size_t t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        pthread_mutex_unlock(&p->run_mutex);
        return;
    }
    uint32_t prev = (uint32_t)(atomic_load_explicit(&p->next, memory_order_relaxed) >> 32);
    uint32_t loop = prev + 1;
    if (loop == 0) loop = 1; // 0 is what idle workers have seen at start
    // close the finished loop before its fields are rewritten (see the top of this file)
    atomic_store_explicit(&p->next, (uint64_t)prev << 32 | POOL_CLOSED, memory_order_relaxed);
    atomic_store_explicit(&p->fn, fn, memory_order_release);
    atomic_store_explicit(&p->ctx, ctx, memory_order_release);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_release);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->next, (uint64_t)loop << 32, memory_order_release);
    pthread_mutex_lock(&p->mutex); // wake the workers that went to sleep
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    run_tasks(p, loop, 0);
    for (unsigned i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks;)
        backoff(&i);
    pthread_mutex_unlock(&p->run_mutex);
}
