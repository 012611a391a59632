// admit.h — connection admission: which open connections count against --max-connections and
// --max-connections-per-ip, and the admit / refuse / cut decision for a new one (nginx's
// limit_conn in one decision function: admit_decide, pure, unit-tested). http.c does the
// plumbing: it lists each connection MHD opens here, asks admit_decide, shuts down the one
// the decision cuts, and answers a refused connection's request with 503 + Retry-After.
//
// The rules (the limits' table in the README says the same to operators):
//   - up to max connections are admitted; from one address (per_ip > 0) up to per_ip;
//   - a connection past a limit is refused: its request gets 503 + Retry-After +
//     Connection: close (fast: it never waits behind others), and if it sends none within
//     SRV_REFUSED_GRACE_S it is closed;
//   - refusals are bounded too (max, and 2 * per_ip from one address, as the admitted): past
//     them, room is made by closing the connection that has waited longest for its request
//     (a slow or idle client's), never the new one, so that a client which sends its request
//     at once always gets an answer, 200 or a fast 503, never a bare close: first an admitted
//     one waiting at least ADMIT_SHED_AFTER_S (the new one is then admitted in its place, as
//     nginx reuses idle connections), else the longest-waiting refused one (from the new
//     one's address when that address is at its bound). When every counted connection is
//     being answered (none is waiting), the new one is refused beyond the bound: those end
//     as soon as their answer is written, and MHD's own connection limit still holds;
//   - a connection whose client has closed and which has nothing left to answer (idle after a
//     reply, or its reply complete) does not count, even before MHD has seen the close: before
//     a decision that would refuse or cut, http.c checks the sockets of the new connection's
//     address's such connections (admit_sweep), so that a client's strictly sequential
//     connections are never refused and a limit admits exactly its count. (Connections that
//     never sent a whole request are not checked: a flood of slow ones costs no syscalls.)
//
// Threads: none of its own; the caller serializes every call on one table (http.c's mutex).
#ifndef ADMIT_H
#define ADMIT_H

#include <stddef.h>

#define ADMIT_BUCKETS      256 // connections are also listed by a hash of their client address
#define ADMIT_SHED_AFTER_S 1.0 // an admitted connection waiting this long may be shed

// A client address: the IPv4 or IPv6 bytes (zero-padded), so that equal means one client.
typedef struct {
    int family; // AF_INET, AF_INET6, or 0 (unknown: one address for all such connections)
    unsigned char bytes[16];
} AdmitAddr;

// What a connection counts in.
typedef enum {
    ADMIT_SLOT_NONE,     // nothing: cut (closing), or its client has gone
    ADMIT_SLOT_ADMITTED, // served
    ADMIT_SLOT_REFUSED   // its request gets a 503, then it closes
} AdmitSlot;

// Why a connection was refused (its 503's message).
typedef enum { ADMIT_OK, ADMIT_REFUSED_FULL, ADMIT_REFUSED_PER_IP } AdmitReason;

// One open connection, listed in a table while it is open. http.c embeds it in its own
// per-connection state; the fields are the table's, read and written under the caller's lock.
typedef struct AdmitConn AdmitConn;
struct AdmitConn {
    AdmitConn *prev, *next;       // every listed connection
    AdmitConn *ip_prev, *ip_next; // those in the same address bucket
    AdmitAddr addr;
    unsigned bucket;
    double waiting_since; // monotonic s since it waits for a request; 0: one is being answered
    int answered;         // the request being answered has its whole reply (only bytes to send)
    int served;           // a request of it was answered: waiting again means idle keep-alive
    AdmitReason refused;  // ADMIT_OK, or why its request gets a 503
    AdmitSlot slot;
};

typedef struct {
    size_t max, per_ip; // the limits (per_ip 0: none)
    AdmitConn *conns;
    AdmitConn *by_ip[ADMIT_BUCKETS];
    size_t n_admitted, n_refused; // connections counted in each slot
} AdmitTable;

// What admit_decide looks at: the limits, the counts, and how long the best candidates to
// make room have waited for their request (seconds; < 0: there is none).
typedef struct {
    size_t max, per_ip;
    size_t admitted, refused;   // counted connections
    size_t ip_all, ip_admitted; // of those, the new connection's address's
    double admitted_wait;       // the longest wait of an admitted connection
    double refused_wait;        // of a refused one
    double ip_refused_wait;     // of a refused one from the new connection's address
} AdmitView;

// Which waiting connection is closed to make room for the new one.
typedef enum {
    ADMIT_CUT_NONE,
    ADMIT_CUT_ADMITTED,   // the admitted one that has waited longest (shed)
    ADMIT_CUT_REFUSED,    // the refused one that has waited longest
    ADMIT_CUT_IP_REFUSED, // the refused one from the new one's address that has waited longest
} AdmitCut;

typedef struct {
    AdmitSlot slot;     // ADMIT_SLOT_ADMITTED or ADMIT_SLOT_REFUSED
    AdmitReason reason; // for a refusal: the limit it is past
    AdmitCut cut;
} AdmitDecision;

// The new connection's fate under the rules above, from v alone (a pure function: no clock,
// no table). Never ADMIT_SLOT_NONE: a new connection is admitted or refused, not closed.
AdmitDecision admit_decide(const AdmitView *v);

// An empty table with its limits (max >= 1; per_ip 0: none).
void admit_table_init(AdmitTable *t, size_t max, size_t per_ip);

// The view of t for a new connection from a at time now, and the candidates its cuts name
// (each may be NULL: none is waiting): *oldest_admitted, *oldest_refused, *oldest_ip_refused.
void admit_view(const AdmitTable *t, const AdmitAddr *a, double now, AdmitView *v,
                AdmitConn **oldest_admitted, AdmitConn **oldest_refused,
                AdmitConn **oldest_ip_refused);

// Lists c (not listed yet; its addr set) in the slot d gives it, with c->refused, waiting
// for its request since now.
void admit_add(AdmitTable *t, AdmitConn *c, const AdmitDecision *d, double now);

// c stops counting against the limits (cut, or its client has gone); it stays listed.
void admit_unslot(AdmitTable *t, AdmitConn *c);

// Unlists c (MHD closed it); its slot is released.
void admit_remove(AdmitTable *t, AdmitConn *c);

// Unslots every counted connection from a's address that has nothing left to answer (idle
// after a reply, or its reply complete) and for which gone(c, ctx) says its client has
// closed (http.c reads its socket). The count unslotted.
size_t admit_sweep(AdmitTable *t, const AdmitAddr *a, int (*gone)(const AdmitConn *c, void *ctx),
                   void *ctx);

// Whether c's request is overdue at now: a refused connection's after grace_s, an admitted
// one's after timeout_s (0: never); a connection being answered, or not counted, never.
int admit_overdue(const AdmitConn *c, double now, double grace_s, double timeout_s);

#endif
