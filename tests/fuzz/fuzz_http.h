// fuzz_http.h — the seam between fuzz_http.c and its stand-ins for http.c and sched.c
// (fuzz_http_stubs.c).
#ifndef FUZZ_HTTP_H
#define FUZZ_HTTP_H

#include "api.h"

// The app srv_app() returns for every request.
void fuzz_http_set_app(ApiApp *app);
// A non-NULL engine handle for ApiApp.sched (the stubs never look inside it).
Sched *fuzz_http_sched(void);
// Ends r as srv_completed() would (runs r->done) and checks that exactly one reply was
// queued with a status a client's input may cause.
void fuzz_http_complete(SrvReq *r);

#endif
