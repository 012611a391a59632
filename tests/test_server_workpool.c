// test_server_workpool.c — server/http/workpool.c, the threads that run the part of a request
// whose cost grows with it (issue 33 item 6: reached only end to end before). Its contract
// (workpool.h), case by case: every call runs once, in the order queued when one thread takes
// them; n_threads run and max_queue wait, one more is KG_EBUSY until a slot frees; the gauges;
// a stopping pool refuses new calls (KG_ECANCEL), lets the running ones finish and runs what
// is still queued as cancelled. Run under ThreadSanitizer too (scripts/test.sh).
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "server/http/workpool.h"

#define N_MANY 2000

// A gate that calls can be held at: closed, a call waits in gate_pass until gate_open.
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, waiting;
} Gate;

static Gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void gate_pass(void) {
    pthread_mutex_lock(&gate.mu);
    gate.waiting++;
    pthread_cond_broadcast(&gate.cv);
    while (!gate.open)
        pthread_cond_wait(&gate.cv, &gate.mu);
    gate.waiting--;
    pthread_mutex_unlock(&gate.mu);
}

static void gate_set(int open) {
    pthread_mutex_lock(&gate.mu);
    gate.open = open;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
}

// Blocks until n calls wait at the gate.
static void gate_wait_for(int n) {
    pthread_mutex_lock(&gate.mu);
    while (gate.waiting < n)
        pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
}

// What each call saw: how often it ran, and whether cancelled; and the order they ran in.
static atomic_int ran[N_MANY], cancelled_runs[N_MANY];
static int order[N_MANY];
static atomic_int n_order;

static void record(int i, int cancelled) {
    atomic_fetch_add(&ran[i], 1);
    if (cancelled) atomic_fetch_add(&cancelled_runs[i], 1);
    order[atomic_fetch_add(&n_order, 1)] = i;
}

static void call_plain(void *arg, int cancelled) { record((int)(intptr_t)arg, cancelled); }

static void call_gated(void *arg, int cancelled) {
    if (!cancelled) gate_pass();
    record((int)(intptr_t)arg, cancelled);
}

static void reset(void) {
    for (int i = 0; i < N_MANY; i++)
        atomic_store(&ran[i], 0), atomic_store(&cancelled_runs[i], 0);
    atomic_store(&n_order, 0);
}

// Waits (up to 10 s) until the pool shows queued and running; 1 if it did.
static int gauges_reach(WorkPool *p, size_t queued, size_t running) {
    for (int t = 0; t < 10000; t++) {
        size_t q, r;
        workpool_gauges(p, &q, &r);
        if (q == queued && r == running) return 1;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return 0;
}

// Every call runs exactly once, not cancelled; with one thread, in the order queued.
static void test_every_call_once(size_t n_threads) {
    WorkPool *p;
    char err[KG_ERRLEN];
    reset();
    REQUIRE(workpool_start(&p, n_threads, N_MANY, err) == KG_OK, "%s", err);
    for (int i = 0; i < N_MANY; i++)
        CHECK(workpool_submit(p, call_plain, (void *)(intptr_t)i) == KG_OK);
    CHECK(gauges_reach(p, 0, 0));
    workpool_stop(p);
    int once = 1, none_cancelled = 1, in_order = 1;
    for (int i = 0; i < N_MANY; i++) {
        once &= atomic_load(&ran[i]) == 1;
        none_cancelled &= atomic_load(&cancelled_runs[i]) == 0;
        in_order &= order[i] == i;
    }
    CHECK_MSG(once && none_cancelled, "%zu threads: every call once, none cancelled", n_threads);
    if (n_threads == 1) CHECK_MSG(in_order, "one thread runs the calls in the order queued");
}

// n_threads run, max_queue wait, the next is refused until one finishes.
static void test_bound(void) {
    WorkPool *p;
    char err[KG_ERRLEN];
    reset();
    gate_set(0);
    REQUIRE(workpool_start(&p, 2, 3, err) == KG_OK, "%s", err);
    for (int i = 0; i < 5; i++)
        CHECK(workpool_submit(p, call_gated, (void *)(intptr_t)i) == KG_OK);
    gate_wait_for(2); // the two threads hold calls 0 and 1 at the gate
    CHECK(gauges_reach(p, 3, 2));
    CHECK(workpool_submit(p, call_plain, (void *)5) == KG_EBUSY);
    CHECK(atomic_load(&ran[5]) == 0); // a refused call is never called
    gate_set(1);
    CHECK(gauges_reach(p, 0, 0));
    CHECK(workpool_submit(p, call_plain, (void *)6) == KG_OK); // room again
    CHECK(gauges_reach(p, 0, 0));
    workpool_stop(p);
    int ok = 1;
    for (int i = 0; i < 7; i++)
        ok &= atomic_load(&ran[i]) == (i != 5) && !atomic_load(&cancelled_runs[i]);
    CHECK_MSG(ok, "calls 0-4 and 6 ran once, 5 (refused) never");
}

typedef struct {
    WorkPool *p;
} Stopper;

static void *stop_thread(void *arg) {
    workpool_stop(((Stopper *)arg)->p);
    return NULL;
}

// Stopping: new calls are refused, the running one finishes, the queued run cancelled.
static void test_stop(void) {
    WorkPool *p;
    char err[KG_ERRLEN];
    reset();
    gate_set(0);
    REQUIRE(workpool_start(&p, 1, 4, err) == KG_OK, "%s", err);
    CHECK(workpool_submit(p, call_gated, (void *)0) == KG_OK);
    gate_wait_for(1);
    CHECK(workpool_submit(p, call_gated, (void *)1) == KG_OK);
    CHECK(workpool_submit(p, call_gated, (void *)2) == KG_OK);
    Stopper s = {p};
    pthread_t th;
    REQUIRE(!pthread_create(&th, NULL, stop_thread, &s), "pthread_create");
    // the pool stops taking calls while call 0 still runs (so p is still there); a call
    // taken before the stop began is queued (or refused, KG_EBUSY, the queue full)
    int rc = KG_OK, accepted = 0;
    for (int t = 0; t < 10000 && rc != KG_ECANCEL; t++) {
        rc = workpool_submit(p, call_plain, (void *)3);
        accepted += rc == KG_OK;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    CHECK(rc == KG_ECANCEL);
    gate_set(1);
    pthread_join(th, NULL);
    CHECK(atomic_load(&ran[0]) == 1 && atomic_load(&cancelled_runs[0]) == 0);
    CHECK(atomic_load(&ran[1]) == 1 && atomic_load(&cancelled_runs[1]) == 1);
    CHECK(atomic_load(&ran[2]) == 1 && atomic_load(&cancelled_runs[2]) == 1);
    CHECK(atomic_load(&ran[3]) == accepted && atomic_load(&cancelled_runs[3]) == accepted);
    workpool_stop(NULL); // fine
}

int main(void) {
    test_every_call_once(1);
    test_every_call_once(4);
    test_bound();
    test_stop();
    return check_report();
}
