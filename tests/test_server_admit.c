// test_server_admit.c — connection admission (server/http/admit.h) without sockets: the
// decision over its cases and over every count of small limits, and the table over the two
// faults of issue 32 item 6: a new connection is never closed without an answer (it is
// admitted or refused, and room is made by cutting one that waits for its request), the
// per-address limit admits exactly its count, and a client's strictly sequential connections
// are never refused even while MHD has not yet seen the previous one close.
#include <string.h>

#include "check.h"
#include "server/http/admit.h"

static AdmitDecision decide(size_t max, size_t per_ip, size_t admitted, size_t refused,
                            size_t ip_all, size_t ip_admitted, double admitted_wait,
                            double refused_wait, double ip_refused_wait) {
    AdmitView v = {max,         per_ip,        admitted,     refused,        ip_all,
                   ip_admitted, admitted_wait, refused_wait, ip_refused_wait};
    return admit_decide(&v);
}

#define IS(d, s, r, c) ((d).slot == (s) && (d).reason == (r) && (d).cut == (c))

// The rules of admit.h, one case each.
static void test_cases(void) {
    // under every limit: admitted, nothing cut
    AdmitDecision d = decide(4, 2, 1, 0, 1, 1, 0.5, -1, -1);
    CHECK(IS(d, ADMIT_SLOT_ADMITTED, ADMIT_OK, ADMIT_CUT_NONE));
    // max admitted: refused (503) while refusals are few, even with an idle admitted one
    d = decide(4, 0, 4, 0, 4, 4, 9.0, -1, -1);
    CHECK(IS(d, ADMIT_SLOT_REFUSED, ADMIT_REFUSED_FULL, ADMIT_CUT_NONE));
    // both full: the admitted one waiting >= ADMIT_SHED_AFTER_S is shed, the new one admitted
    d = decide(4, 0, 4, 4, 8, 4, ADMIT_SHED_AFTER_S, 0.1, 0.1);
    CHECK(IS(d, ADMIT_SLOT_ADMITTED, ADMIT_OK, ADMIT_CUT_ADMITTED));
    // both full, no admitted one waiting long enough: the longest-waiting refused one is
    // cut and the new one refused (before: closed at once, a bare close)
    d = decide(4, 0, 4, 4, 8, 4, 0.5, 0.01, 0.01);
    CHECK(IS(d, ADMIT_SLOT_REFUSED, ADMIT_REFUSED_FULL, ADMIT_CUT_REFUSED));
    // both full and every one being answered: refused beyond the bound, nothing cut
    d = decide(4, 0, 4, 4, 8, 4, -1, -1, -1);
    CHECK(IS(d, ADMIT_SLOT_REFUSED, ADMIT_REFUSED_FULL, ADMIT_CUT_NONE));
    // the address at its limit: refused, whatever room the server has
    d = decide(100, 2, 2, 0, 2, 2, 5.0, -1, -1);
    CHECK(IS(d, ADMIT_SLOT_REFUSED, ADMIT_REFUSED_PER_IP, ADMIT_CUT_NONE));
    // ... and never admitted by shedding (that would be one over its limit): with the
    // server's refusals full too, the longest-waiting refused one makes room
    d = decide(4, 2, 4, 4, 3, 2, 5.0, 1.0, 1.0);
    CHECK(IS(d, ADMIT_SLOT_REFUSED, ADMIT_REFUSED_PER_IP, ADMIT_CUT_REFUSED));
    // the address's refusals at their bound (2 x per_ip): its longest-waiting refused one is
    // cut (before: the new one closed at once)
    d = decide(100, 2, 2, 2, 4, 2, 0.3, 0.2, 0.2);
    CHECK(IS(d, ADMIT_SLOT_REFUSED, ADMIT_REFUSED_PER_IP, ADMIT_CUT_IP_REFUSED));
    // ... none of them waiting: refused beyond the bound
    d = decide(100, 2, 2, 2, 4, 2, 0.3, 0.2, -1);
    CHECK(IS(d, ADMIT_SLOT_REFUSED, ADMIT_REFUSED_PER_IP, ADMIT_CUT_NONE));
    // a server-wide refusal from an address at its bound cuts that address's refused one
    d = decide(4, 3, 4, 4, 6, 1, 0.2, 0.5, 0.1);
    CHECK(IS(d, ADMIT_SLOT_REFUSED, ADMIT_REFUSED_FULL, ADMIT_CUT_IP_REFUSED));
}

// Every count for max 1..4, per_ip 0..3 and each wait (none, short, long): the decision's
// invariants.
static void test_grid(void) {
    static const double WAITS[] = {-1, 0.2, ADMIT_SHED_AFTER_S + 0.5};
    size_t cases = 0, bad = 0;
    for (size_t max = 1; max <= 4; max++)
        for (size_t per_ip = 0; per_ip <= 3; per_ip++)
            for (size_t adm = 0; adm <= max; adm++)
                for (size_t ref = 0; ref <= max + 1; ref++)
                    for (size_t ipa = 0; ipa <= adm && (!per_ip || ipa <= per_ip); ipa++)
                        for (size_t ipr = 0; ipr <= ref; ipr++)
                            for (int w = 0; w < 27; w++) {
                                double aw = WAITS[w % 3], rw = WAITS[w / 3 % 3];
                                double iw = ipr ? WAITS[w / 9] : -1;
                                if (ipr && rw < iw) rw = iw; // the address's are among all
                                AdmitView v = {max, per_ip,        adm,           ref, ipa + ipr,
                                               ipa, adm ? aw : -1, ref ? rw : -1, iw};
                                AdmitDecision d = admit_decide(&v);
                                cases++;
                                // admitted or refused: never closed at once
                                int ok =
                                    d.slot == ADMIT_SLOT_ADMITTED || d.slot == ADMIT_SLOT_REFUSED;
                                // a cut names a connection that waits for its request
                                ok &= d.cut != ADMIT_CUT_ADMITTED ||
                                      (v.admitted_wait >= ADMIT_SHED_AFTER_S &&
                                       d.slot == ADMIT_SLOT_ADMITTED);
                                ok &= d.cut != ADMIT_CUT_REFUSED || v.refused_wait >= 0;
                                ok &= d.cut != ADMIT_CUT_IP_REFUSED || v.ip_refused_wait >= 0;
                                // the limits hold after the decision
                                size_t adm_after = adm + (d.slot == ADMIT_SLOT_ADMITTED) -
                                                   (d.cut == ADMIT_CUT_ADMITTED);
                                ok &= adm_after <= max;
                                ok &= !per_ip || d.slot != ADMIT_SLOT_ADMITTED || ipa < per_ip;
                                // room is never refused
                                int room = adm < max && (!per_ip || ipa < per_ip);
                                ok &= !room || (d.slot == ADMIT_SLOT_ADMITTED && !d.cut);
                                bad += !ok;
                                if (!ok && bad < 5)
                                    fprintf(stderr,
                                            "max %zu per_ip %zu adm %zu ref %zu ip %zu+%zu waits "
                                            "%g %g %g: slot %d cut %d\n",
                                            max, per_ip, adm, ref, ipa, ipr, v.admitted_wait,
                                            v.refused_wait, v.ip_refused_wait, d.slot, d.cut);
                            }
    CHECK_MSG(bad == 0, "%zu of %zu decisions break an invariant", bad, cases);
    printf("grid: %zu decisions, none a bare close, none over a limit\n", cases);
}

// --- the table, driven as http.c drives it ---

#define N_CONNS 64

typedef struct {
    AdmitConn a; // first, as in http.c
    int closed;  // the client has closed it (what admit_sweep's gone() reads)
    int listed;
} FakeConn;

static int fake_gone(const AdmitConn *c, void *ctx) {
    (void)ctx;
    return ((const FakeConn *)c)->closed;
}

static AdmitAddr addr_of(unsigned char last) {
    AdmitAddr a = {.family = 2};
    a.bytes[0] = 127;
    a.bytes[3] = last;
    return a;
}

// What http.c does for a new connection: view, decide, sweep and decide again when the
// first decision would refuse or cut, cut the victim, list it. The decision.
static AdmitDecision admit_new(AdmitTable *t, FakeConn *c, AdmitAddr a, double now) {
    memset(c, 0, sizeof *c);
    c->a.addr = a;
    AdmitView v;
    AdmitConn *oldest[3];
    admit_view(t, &a, now, &v, &oldest[0], &oldest[1], &oldest[2]);
    AdmitDecision d = admit_decide(&v);
    if ((d.slot != ADMIT_SLOT_ADMITTED || d.cut) && admit_sweep(t, &a, fake_gone, NULL)) {
        admit_view(t, &a, now, &v, &oldest[0], &oldest[1], &oldest[2]);
        d = admit_decide(&v);
    }
    AdmitConn *victim = d.cut == ADMIT_CUT_ADMITTED     ? oldest[0]
                        : d.cut == ADMIT_CUT_REFUSED    ? oldest[1]
                        : d.cut == ADMIT_CUT_IP_REFUSED ? oldest[2]
                                                        : NULL;
    if (victim) admit_unslot(t, victim);
    admit_add(t, &c->a, &d, now);
    c->listed = 1;
    return d;
}

// A client's strictly sequential connections, each closed by the client after its reply while
// the server has not yet unlisted it (MHD's CLOSED comes later, on another thread): with
// per_ip 1 (and max 1), none is refused. Before admit_sweep each second one was.
static void test_sequential(size_t max, size_t per_ip) {
    AdmitTable t;
    admit_table_init(&t, max, per_ip);
    static FakeConn conns[2];
    memset(conns, 0, sizeof conns);
    size_t refused = 0;
    double now = 1000;
    for (int i = 0; i < 1000; i++, now += 0.001) {
        FakeConn *c = &conns[i % 2];
        if (c->listed) admit_remove(&t, &c->a); // MHD's CLOSED for the one before last
        AdmitDecision d = admit_new(&t, c, addr_of(1), now);
        refused += d.slot != ADMIT_SLOT_ADMITTED;
        // the request is answered (waiting 0, then the reply whole), then the connection is
        // idle again and the client closes it; on odd rounds it closes while the reply is
        // still being sent (answered), on even ones once it is idle
        c->a.waiting_since = 0;
        c->a.answered = 1;
        if (i % 2 == 0) {
            c->a.waiting_since = now;
            c->a.answered = 0;
            c->a.served = 1;
        }
        c->closed = 1;
    }
    CHECK_MSG(refused == 0, "max %zu per_ip %zu: %zu of 1000 sequential connections refused", max,
              per_ip, refused);
    printf("sequential: 1000 connections, max %zu per_ip %zu: %zu refused\n", max, per_ip, refused);
}

// per_ip + k connections from one address at once: exactly per_ip admitted, the rest refused
// (none cut, none over); another address still admitted.
static void test_exact_limit(void) {
    for (size_t per_ip = 1; per_ip <= 8; per_ip++) {
        AdmitTable t;
        admit_table_init(&t, 256, per_ip);
        static FakeConn conns[N_CONNS];
        size_t admitted = 0, refused = 0, cut = 0;
        for (size_t i = 0; i < 2 * per_ip + 3 && i < N_CONNS - 1; i++) {
            AdmitDecision d = admit_new(&t, &conns[i], addr_of(1), 1000 + 0.001 * (double)i);
            admitted += d.slot == ADMIT_SLOT_ADMITTED;
            refused += d.slot == ADMIT_SLOT_REFUSED;
            cut += d.cut != ADMIT_CUT_NONE;
        }
        AdmitDecision other = admit_new(&t, &conns[N_CONNS - 1], addr_of(2), 1001);
        CHECK_MSG(admitted == per_ip && t.n_admitted == per_ip + 1 &&
                      other.slot == ADMIT_SLOT_ADMITTED,
                  "per_ip %zu: %zu admitted (table %zu), another address %d", per_ip, admitted,
                  t.n_admitted, other.slot);
        // past 2 x per_ip the address's oldest waiting refusal is cut, never the new one
        CHECK_MSG(cut == 3 && t.n_refused == per_ip, "per_ip %zu: %zu cut, %zu refused counted",
                  per_ip, cut, t.n_refused);
    }
    printf("exact limit: per_ip 1..8, per_ip + k at once: exactly per_ip admitted\n");
}

// A listed connection being answered (its request in, no reply yet) counts even when its
// client has half-closed: such a client still gets its answer and still holds its slot.
static void test_half_closed(void) {
    AdmitTable t;
    admit_table_init(&t, 8, 1);
    static FakeConn a, b;
    admit_new(&t, &a, addr_of(1), 1000);
    a.a.waiting_since = 0; // its request arrived; no reply yet
    a.closed = 1;          // shutdown(SHUT_WR) after sending it
    AdmitDecision d = admit_new(&t, &b, addr_of(1), 1000.5);
    CHECK(d.slot == ADMIT_SLOT_REFUSED && a.a.slot == ADMIT_SLOT_ADMITTED);
    // a slow client that never finished a request is not read (no syscall per dripper)
    static FakeConn c, e;
    admit_table_init(&t, 8, 1);
    admit_new(&t, &c, addr_of(3), 1000);
    c.closed = 1; // (gone, but never served: left to MHD)
    d = admit_new(&t, &e, addr_of(3), 1000.1);
    CHECK(d.slot == ADMIT_SLOT_REFUSED && c.a.slot == ADMIT_SLOT_ADMITTED);
}

// The watchdog's rule: a refused connection's request is due within the grace, an admitted
// one's within the request timeout (0: never); one being answered or not counted, never.
static void test_overdue(void) {
    AdmitConn c = {.waiting_since = 100, .slot = ADMIT_SLOT_ADMITTED};
    CHECK(!admit_overdue(&c, 105, 2, 0) && admit_overdue(&c, 131, 2, 30) &&
          !admit_overdue(&c, 129, 2, 30));
    c.refused = ADMIT_REFUSED_FULL;
    c.slot = ADMIT_SLOT_REFUSED;
    CHECK(admit_overdue(&c, 102.5, 2, 30) && !admit_overdue(&c, 101.5, 2, 30));
    c.waiting_since = 0;
    CHECK(!admit_overdue(&c, 1e9, 2, 30));
    c.waiting_since = 100;
    c.slot = ADMIT_SLOT_NONE;
    CHECK(!admit_overdue(&c, 1e9, 2, 30));
}

int main(void) {
    test_cases();
    test_grid();
    test_sequential(1, 1);
    test_sequential(1, 0);
    test_sequential(4, 1);
    test_exact_limit();
    test_half_closed();
    test_overdue();
    return check_report();
}
