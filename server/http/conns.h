// conns.h — the transport's open connections (internal to server/http): each admitted or
// refused when MHD accepts it (admit.h makes the decision, a pure function; here it is
// applied: a connection is listed, refused ones get a 503, one is cut to make room), unlisted
// when MHD closes it, and shut down by a watchdog thread when its request is overdue
// (request_timeout_s from the connection's opening or its previous reply; a refused one's
// within SRV_REFUSED_GRACE_S).
//
// Threads: every function takes the table's lock itself; conns_notify is MHD's
// NOTIFY_CONNECTION callback (any of MHD's threads), the watchdog is a thread of its own.
#ifndef CONNS_H
#define CONNS_H

#include <microhttpd.h>
#include <pthread.h>
#include <stddef.h>

#include "admit.h"
#include "http.h"

// One open connection (MHD's socket context), listed in the table while it is open.
struct SrvConn {
    AdmitConn a; // first: the table's entry (admit.h)
    MHD_socket fd;
};

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; // wakes the watchdog to stop
    AdmitTable adm;    // under mu
    unsigned request_timeout_s;
    int log; // the watchdog logs the connections it closes
    int watchdog_on, watchdog_stop;
    pthread_t watchdog;
} ConnTable;

// An empty table with admission's limits (admit_table_init's) and the request deadline
// (0: none). No thread yet.
void conns_init(ConnTable *t, unsigned max_connections, unsigned max_connections_per_ip,
                unsigned request_timeout_s, int log);
// Starts the watchdog (every 250 ms). KG_ENOMEM when the thread cannot start.
int conns_watch(ConnTable *t, char *err);
// Stops the watchdog if it runs; MHD must have stopped (every connection unlisted) first.
void conns_free(ConnTable *t);
// MHD's MHD_OPTION_NOTIFY_CONNECTION callback (cls: the ConnTable): decides and lists a
// connection on STARTED (its SrvConn is *socket_context; NULL when it could not be made,
// then it is neither limited nor watched), unlists and frees it on CLOSED.
void conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                  enum MHD_ConnectionNotificationCode toe);
// c's request: waiting = 1, answered, the next one is expected from now (the deadline runs);
// 0, it has arrived. c may be NULL (nothing to do).
void conns_arm(ConnTable *t, SrvConn *c, int waiting);
// The request on c has its whole reply: only bytes to send are left. c may be NULL.
void conns_answered(ConnTable *t, SrvConn *c);
// The admitted and refused connections now.
void conns_counts(ConnTable *t, size_t *admitted, size_t *refused);

#endif
