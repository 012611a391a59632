// conns.c — the open connections: each one admitted or refused as admit.h decides, listed
// while it is open, cut to make room, and shut down by a watchdog thread when its request is
// overdue. http.c calls conns_arm / conns_answered as requests arrive and are answered.
#include "conns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"
#include "metrics.h"

// waiting = 1: a request has been answered and the next is expected from now on (the
// deadline runs); 0: it has arrived.
void conns_arm(ConnTable *t, SrvConn *c, int waiting) {
    if (!c) return;
    pthread_mutex_lock(&t->mu);
    c->a.waiting_since = waiting ? kg_now_s() : 0;
    c->a.answered = 0;
    c->a.served |= waiting;
    pthread_mutex_unlock(&t->mu);
}

// The request being answered on c has its whole reply: only bytes to send are left.
void conns_answered(ConnTable *t, SrvConn *c) {
    if (!c) return;
    pthread_mutex_lock(&t->mu);
    c->a.answered = 1;
    pthread_mutex_unlock(&t->mu);
}

// The client address of conn (family 0 when MHD has none).
static AdmitAddr conns_addr(struct MHD_Connection *conn) {
    AdmitAddr a = {0};
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET) {
        memcpy(a.bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        a.family = AF_INET;
    } else if (sa && sa->sa_family == AF_INET6) {
        memcpy(a.bytes, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        a.family = AF_INET6;
    }
    return a;
}

// Shuts c down: MHD then reads end-of-file and closes it as hung up (the descriptor stays
// MHD's; MHD sends CLOSED before closing it, so this never touches a reused descriptor).
// Its slot is free at once. Caller holds conns_mu.
static void conns_cut(ConnTable *t, SrvConn *c) {
    shutdown(c->fd, SHUT_RDWR);
    admit_unslot(&t->adm, &c->a);
}

// admit_sweep's question: has the client of a listed connection closed its side (end of
// file, or an error such as a reset)? Read without taking a byte, on any thread: the
// descriptor stays open until MHD's CLOSED, which unlists it under conns_mu first.
static int conns_gone(const AdmitConn *a, void *ctx) {
    (void)ctx;
    char b;
    ssize_t n = recv(((const SrvConn *)a)->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// Decides a new connection's fate (admit.h) and lists it: admitted, or refused (its request
// gets 503); a connection the decision cuts to make room is shut down. Before a decision that
// refuses or cuts, the address's connections whose client has gone stop counting (MHD may not
// have read their end yet: a client's strictly sequential connections must never be refused).
// Caller holds conns_mu; c is not listed yet.
static void conns_admit(ConnTable *t, SrvConn *c, double now) {
    AdmitView v;
    AdmitConn *oldest[3]; // admitted, refused, refused from c's address
    admit_view(&t->adm, &c->a.addr, now, &v, &oldest[0], &oldest[1], &oldest[2]);
    AdmitDecision d = admit_decide(&v);
    if ((d.slot != ADMIT_SLOT_ADMITTED || d.cut) &&
        admit_sweep(&t->adm, &c->a.addr, conns_gone, NULL)) {
        admit_view(&t->adm, &c->a.addr, now, &v, &oldest[0], &oldest[1], &oldest[2]);
        d = admit_decide(&v);
    }
    AdmitConn *victim = d.cut == ADMIT_CUT_ADMITTED     ? oldest[0]
                        : d.cut == ADMIT_CUT_REFUSED    ? oldest[1]
                        : d.cut == ADMIT_CUT_IP_REFUSED ? oldest[2]
                                                        : NULL;
    if (victim) {
        conns_cut(t, (SrvConn *)victim);
        metrics_reject(d.cut == ADMIT_CUT_ADMITTED ? METRICS_REJ_SHED : METRICS_REJ_CLOSED, 1);
    }
    admit_add(&t->adm, &c->a, &d, now);
}

// MHD's connection notifications: decide and list on STARTED, unlist on CLOSED.
void conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                  enum MHD_ConnectionNotificationCode toe) {
    ConnTable *t = cls;
    SrvConn *c = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c = ci ? calloc(1, sizeof *c) : NULL; // NULL: neither limited nor watched
        if (c) {
            c->fd = ci->connect_fd;
            c->a.addr = conns_addr(conn);
            pthread_mutex_lock(&t->mu);
            conns_admit(t, c, kg_now_s());
            pthread_mutex_unlock(&t->mu);
        }
        *socket_context = c;
        return;
    }
    if (c) {
        pthread_mutex_lock(&t->mu);
        admit_remove(&t->adm, &c->a);
        pthread_mutex_unlock(&t->mu);
    }
    free(c);
    *socket_context = NULL;
}

// The watchdog: every 250 ms, shuts down the connections whose request is overdue: past
// request_timeout_s, or past SRV_REFUSED_GRACE_S for a refused one.
static void *conns_watchdog(void *arg) {
    ConnTable *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->watchdog_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        if (ts.tv_nsec >= 1000 * 1000 * 1000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000 * 1000 * 1000;
        }
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        double now = kg_now_s(), timeout = (double)t->request_timeout_s;
        size_t n_cut = 0, n_refused_cut = 0;
        for (AdmitConn *a = t->adm.conns; a; a = a->next) {
            if (!admit_overdue(a, now, SRV_REFUSED_GRACE_S, timeout)) continue;
            a->refused ? n_refused_cut++ : n_cut++;
            conns_cut(t, (SrvConn *)a);
        }
        if (n_cut + n_refused_cut)
            metrics_reject(METRICS_REJ_REQUEST_TIMEOUT, n_cut + n_refused_cut);
        if (n_cut && t->log) {
            pthread_mutex_unlock(&t->mu);
            log_msg(LOG_WARN,
                    "request timeout: closed %zu connection(s) whose request did not arrive "
                    "within %us",
                    n_cut, t->request_timeout_s);
            pthread_mutex_lock(&t->mu);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

void conns_init(ConnTable *t, unsigned max_connections, unsigned max_connections_per_ip,
                unsigned request_timeout_s, int log) {
    *t = (ConnTable){.request_timeout_s = request_timeout_s, .log = log};
    admit_table_init(&t->adm, max_connections, max_connections_per_ip);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
}

int conns_watch(ConnTable *t, char *err) {
    if (pthread_create(&t->watchdog, NULL, conns_watchdog, t))
        return kg_err(err, KG_ENOMEM, "server: could not start the watchdog thread");
    t->watchdog_on = 1;
    return KG_OK;
}

void conns_counts(ConnTable *t, size_t *admitted, size_t *refused) {
    pthread_mutex_lock(&t->mu);
    *admitted = t->adm.n_admitted;
    *refused = t->adm.n_refused;
    pthread_mutex_unlock(&t->mu);
}

void conns_free(ConnTable *t) {
    if (t->watchdog_on) {
        pthread_mutex_lock(&t->mu);
        t->watchdog_stop = 1;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->watchdog, NULL);
        t->watchdog_on = 0;
    }
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}
