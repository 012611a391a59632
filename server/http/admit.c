// admit.c — connection admission (admit.h): the decision, and the table of open connections
// it is made from.
#include "admit.h"

#include <stdint.h>
#include <string.h>

AdmitDecision admit_decide(const AdmitView *v) {
    AdmitDecision d = {ADMIT_SLOT_ADMITTED, ADMIT_OK, ADMIT_CUT_NONE};
    int ip_full = v->per_ip && v->ip_admitted >= v->per_ip;
    if (!ip_full) {
        if (v->admitted < v->max) return d;
        // full: while refusals are few the new one is refused (503); past them an admitted
        // one that has waited long for its request gives the new one its place
        if (v->refused >= v->max && v->admitted_wait >= ADMIT_SHED_AFTER_S) {
            d.cut = ADMIT_CUT_ADMITTED;
            return d;
        }
    }
    d.slot = ADMIT_SLOT_REFUSED;
    d.reason = ip_full ? ADMIT_REFUSED_PER_IP : ADMIT_REFUSED_FULL;
    // the refusals' own bounds: past them the longest-waiting refused one makes room (none
    // waiting: each is being answered and ends at once; the new one is refused beyond)
    if (v->per_ip && v->ip_all >= 2 * v->per_ip)
        d.cut = v->ip_refused_wait >= 0 ? ADMIT_CUT_IP_REFUSED : ADMIT_CUT_NONE;
    else if (v->refused >= v->max)
        d.cut = v->refused_wait >= 0 ? ADMIT_CUT_REFUSED : ADMIT_CUT_NONE;
    return d;
}

void admit_table_init(AdmitTable *t, size_t max, size_t per_ip) {
    memset(t, 0, sizeof *t);
    t->max = max;
    t->per_ip = per_ip;
}

static unsigned admit_bucket(const AdmitAddr *a) {
    uint32_t h = 2166136261u ^ (uint32_t)a->family; // FNV-1a
    for (size_t i = 0; i < sizeof a->bytes; i++)
        h = (h ^ a->bytes[i]) * 16777619u;
    return h % ADMIT_BUCKETS;
}

static int admit_same(const AdmitAddr *a, const AdmitAddr *b) {
    return a->family == b->family && !memcmp(a->bytes, b->bytes, sizeof a->bytes);
}

// c's wait for its request at now, or -1 when it waits for none (a request is being
// answered) or counts for nothing.
static double admit_wait(const AdmitConn *c, double now) {
    return c->slot != ADMIT_SLOT_NONE && c->waiting_since > 0 ? now - c->waiting_since : -1;
}

// *best = c when c has waited longer than *best (in *wait).
static void admit_keep_oldest(AdmitConn *c, double now, AdmitConn **best, double *wait) {
    double w = admit_wait(c, now);
    if (w >= 0 && w > *wait) {
        *wait = w;
        *best = c;
    }
}

void admit_view(const AdmitTable *t, const AdmitAddr *a, double now, AdmitView *v,
                AdmitConn **oldest_admitted, AdmitConn **oldest_refused,
                AdmitConn **oldest_ip_refused) {
    *v = (AdmitView){.max = t->max,
                     .per_ip = t->per_ip,
                     .admitted = t->n_admitted,
                     .refused = t->n_refused,
                     .admitted_wait = -1,
                     .refused_wait = -1,
                     .ip_refused_wait = -1};
    *oldest_admitted = *oldest_refused = *oldest_ip_refused = NULL;
    for (AdmitConn *c = t->conns; c; c = c->next) {
        if (c->slot == ADMIT_SLOT_ADMITTED)
            admit_keep_oldest(c, now, oldest_admitted, &v->admitted_wait);
        else if (c->slot == ADMIT_SLOT_REFUSED)
            admit_keep_oldest(c, now, oldest_refused, &v->refused_wait);
    }
    for (AdmitConn *c = t->by_ip[admit_bucket(a)]; c; c = c->ip_next) {
        if (c->slot == ADMIT_SLOT_NONE || !admit_same(&c->addr, a)) continue;
        v->ip_all++;
        v->ip_admitted += c->slot == ADMIT_SLOT_ADMITTED;
        if (c->slot == ADMIT_SLOT_REFUSED)
            admit_keep_oldest(c, now, oldest_ip_refused, &v->ip_refused_wait);
    }
}

void admit_add(AdmitTable *t, AdmitConn *c, const AdmitDecision *d, double now) {
    c->bucket = admit_bucket(&c->addr);
    c->waiting_since = now;
    c->answered = c->served = 0;
    c->refused = d->slot == ADMIT_SLOT_REFUSED ? d->reason : ADMIT_OK;
    c->slot = d->slot;
    if (c->slot == ADMIT_SLOT_ADMITTED) t->n_admitted++;
    if (c->slot == ADMIT_SLOT_REFUSED) t->n_refused++;
    c->prev = NULL;
    c->next = t->conns;
    if (t->conns) t->conns->prev = c;
    t->conns = c;
    c->ip_prev = NULL;
    c->ip_next = t->by_ip[c->bucket];
    if (c->ip_next) c->ip_next->ip_prev = c;
    t->by_ip[c->bucket] = c;
}

void admit_unslot(AdmitTable *t, AdmitConn *c) {
    if (c->slot == ADMIT_SLOT_ADMITTED) t->n_admitted--;
    if (c->slot == ADMIT_SLOT_REFUSED) t->n_refused--;
    c->slot = ADMIT_SLOT_NONE;
}

void admit_remove(AdmitTable *t, AdmitConn *c) {
    admit_unslot(t, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        t->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->ip_prev)
        c->ip_prev->ip_next = c->ip_next;
    else
        t->by_ip[c->bucket] = c->ip_next;
    if (c->ip_next) c->ip_next->ip_prev = c->ip_prev;
    c->prev = c->next = c->ip_prev = c->ip_next = NULL;
}

size_t admit_sweep(AdmitTable *t, const AdmitAddr *a, int (*gone)(const AdmitConn *c, void *ctx),
                   void *ctx) {
    size_t n = 0;
    for (AdmitConn *c = t->by_ip[admit_bucket(a)]; c; c = c->ip_next) {
        if (c->slot == ADMIT_SLOT_NONE || !admit_same(&c->addr, a)) continue;
        int idle = c->served && c->waiting_since > 0; // (one whose request is coming: not)
        if (!(idle || c->answered) || !gone(c, ctx)) continue;
        admit_unslot(t, c);
        n++;
    }
    return n;
}

int admit_overdue(const AdmitConn *c, double now, double grace_s, double timeout_s) {
    double waited = admit_wait(c, now);
    if (waited <= 0) return 0;
    return c->refused ? waited > grace_s : timeout_s > 0 && waited > timeout_s;
}
