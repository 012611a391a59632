// ep_info.c — the GET endpoints: what is served and how it is doing.
//
//   /v1/models -> {object: "list", data: [each model]};  /v1/models/{id} -> the model, or 404
//   /healthz   -> 200 while the process lives (never waits on the engine)
//   /readyz    -> 200 when every model is loaded and warm and we are not draining, else 503
//   /metrics   -> Prometheus text (metrics.h), for the daemon: each engine's gauges by model
//   other GETs outside /v1/: the Explorer's files (--web-dir)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "server/http/metrics.h"

// {"id", "object": "model", "created", "owned_by", "n_ctx", "vocab_size", "ready", and once
// loaded its memory: "weight_bytes", "cache_bytes" (its prefix cache now), "kv_cache_bytes"
// (its KV pool), "kv_cache_used_bytes" (the blocks sequences hold now), "kv_block_tokens",
// "kv_dtype", "device", "dtype"}.
static cJSON *model_json(const ApiApp *app, const ApiModel *served) {
    int ready = atomic_load(&app->ready);
    SchedGauges sg;
    if (ready) sched_gauges(served->sched, &sg);
    cJSON *j_m = cJSON_CreateObject();
    if (!j_m || !cJSON_AddStringToObject(j_m, "id", served->name) ||
        !cJSON_AddStringToObject(j_m, "object", "model") ||
        !cJSON_AddNumberToObject(j_m, "created", (double)app->created) ||
        !cJSON_AddStringToObject(j_m, "owned_by", "kogpt2") ||
        !cJSON_AddNumberToObject(j_m, "n_ctx", (double)served->n_ctx) ||
        !cJSON_AddNumberToObject(j_m, "vocab_size", (double)served->vocab_size) ||
        !cJSON_AddBoolToObject(j_m, "ready", ready) ||
        (ready && (!cJSON_AddNumberToObject(j_m, "weight_bytes", (double)served->weight_bytes) ||
                   !cJSON_AddNumberToObject(j_m, "cache_bytes", (double)sg.cache_bytes) ||
                   !cJSON_AddNumberToObject(j_m, "kv_cache_bytes",
                                            (double)sg.kv.blocks * (double)sg.kv.block_bytes) ||
                   !cJSON_AddNumberToObject(j_m, "kv_cache_used_bytes",
                                            (double)sg.kv.used * (double)sg.kv.block_bytes) ||
                   !cJSON_AddNumberToObject(j_m, "kv_block_tokens", KV_BLOCK_LEN) ||
                   !cJSON_AddStringToObject(j_m, "kv_dtype", served->kv_dtype) ||
                   !cJSON_AddStringToObject(j_m, "device", served->device) ||
                   !cJSON_AddStringToObject(j_m, "dtype", served->dtype)))) {
        cJSON_Delete(j_m);
        return NULL;
    }
    return j_m;
}

enum MHD_Result ep_models(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    const ApiApp *app = srv_app(r->srv); // the names are set before the server starts
    cJSON *j_root = cJSON_CreateObject(), *j_data = NULL;
    int ok = cJSON_AddStringToObject(j_root, "object", "list") &&
             (j_data = cJSON_AddArrayToObject(j_root, "data"));
    for (size_t i = 0; ok && i < app->n_models; i++)
        ok = cJSON_AddItemToArray(j_data, model_json(app, &app->models[i]));
    if (!ok) {
        cJSON_Delete(j_root);
        j_root = NULL;
    }
    return srv_reply_json(r, 200, j_root); // NULL: 503
}

enum MHD_Result ep_model(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    const ApiApp *app = srv_app(r->srv);
    char err[KG_ERRLEN];
    const ApiModel *served = api_model_named(app, r->url + strlen("/v1/models/"), err);
    if (!served) return srv_reply_error(r, 404, err, "model");
    return srv_reply_json(r, 200, model_json(app, served));
}

enum MHD_Result ep_healthz(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    static const char OK[] = "{\"status\":\"ok\"}";
    return srv_reply(r, 200, SRV_TYPE_JSON, OK, sizeof OK - 1, "Cache-Control", "no-store", NULL);
}

enum MHD_Result ep_readyz(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    ApiApp *app = srv_app(r->srv);
    if (srv_draining(r->srv)) return srv_reply_error(r, 503, "draining: shutting down", NULL);
    if (!atomic_load(&app->ready)) return srv_reply_error(r, 503, "the model is loading", NULL);
    static const char OK[] = "{\"status\":\"ready\"}";
    return srv_reply(r, 200, SRV_TYPE_JSON, OK, sizeof OK - 1, "Cache-Control", "no-store", NULL);
}

enum MHD_Result ep_metrics(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    ApiApp *app = srv_app(r->srv);
    SrvGauges sv;
    srv_gauges(r->srv, &sv);
    MetricsGauges g = {.in_flight = srv_in_flight(r->srv),
                       .conns_admitted = sv.admitted,
                       .conns_refused = sv.refused,
                       .work_queued = sv.work_queued,
                       .work_running = sv.work_running,
                       .ready = atomic_load(&app->ready) && !srv_draining(r->srv)};
    // (the models are set before ready turns 1); each engine's figures under its model's name
    for (size_t i = 0; atomic_load(&app->ready) && i < app->n_models && i < METRICS_MAX_MODELS;
         i++) {
        g.device = app->models[0].device;
        SchedGauges sg;
        sched_gauges(app->models[i].sched, &sg);
        g.engines[g.n_engines++] = (MetricsEngine){.model = app->models[i].name,
                                                   .queue_depth = sg.queued,
                                                   .running = sg.running,
                                                   .batch_rows = sg.last_batch_rows,
                                                   .cache_bytes = sg.cache_bytes,
                                                   .cache_capacity = sg.cache_capacity,
                                                   .cache_entries = sg.cache_entries,
                                                   .kv_bytes = sg.kv.blocks * sg.kv.block_bytes,
                                                   .kv_blocks_used = sg.kv.used,
                                                   .kv_blocks_cached = sg.kv.cached,
                                                   .kv_blocks_free = sg.kv.free,
                                                   .kv_block_refs = sg.kv.refs,
                                                   .kv_preemptions = sg.preemptions_total};
    }
    size_t len;
    char *text = metrics_render(&g, &len);
    if (!text) return srv_reply_error(r, 503, "out of memory", NULL);
    enum MHD_Result ret = srv_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len,
                                    "Cache-Control", "no-store", NULL);
    free(text);
    return ret;
}

enum MHD_Result ep_static(SrvReq *r, const cJSON *j_req) {
    (void)j_req;
    return srv_static(r, ((const ApiApp *)srv_app(r->srv))->web_dir, r->url);
}
