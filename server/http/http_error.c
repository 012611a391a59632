// http_error.c — the error replies' bodies: a status from a KG_E* code, OpenAI's error object
// ({"error": {code, type, message, param}}) and, on TGI's routes, TGI's ({"error",
// "error_type"}). Pure builders: http.c queues what they return.
#include <cjson/cJSON.h>

#include "http.h"

int srv_status_from_err(int kg_code) {
    switch (kg_code) {
    case KG_EINVAL:
        return MHD_HTTP_BAD_REQUEST;
    case KG_ERANGE:
        return 422;
    case KG_EUNSUP:
        return 422;
    case KG_ENOTFOUND:
        return MHD_HTTP_NOT_FOUND;
    case KG_EBUSY:
        return MHD_HTTP_TOO_MANY_REQUESTS;
    case KG_ECANCEL:
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    case KG_ENOMEM:
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    default:
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
}

// The "type" of an error reply: OpenAI's names, so that its SDKs show ours as theirs.
static const char *srv_error_type(int status) {
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 429:
        return "rate_limit_error";
    default:
        return status < 500 ? "invalid_request_error" : "server_error";
    }
}

cJSON *srv_error_json(int status, const char *message, const char *param) {
    cJSON *j_root = cJSON_CreateObject();
    cJSON *j_err = cJSON_AddObjectToObject(j_root, "error");
    if (!j_err || !cJSON_AddNumberToObject(j_err, "code", status) ||
        !cJSON_AddStringToObject(j_err, "type", srv_error_type(status)) ||
        !cJSON_AddStringToObject(j_err, "message", message ? message : "") ||
        !(param ? cJSON_AddStringToObject(j_err, "param", param)
                : cJSON_AddNullToObject(j_err, "param"))) {
        cJSON_Delete(j_root);
        return NULL;
    }
    return j_root;
}

// TGI's error_type for a status (its router's names, and ours where it has none).
static const char *srv_tgi_error_type(int status) {
    switch (status) {
    case 401:
        return "unauthorized";
    case 404:
        return "not_found";
    case 429:
    case 503:
        return "overloaded";
    default:
        return status < 500 ? "validation" : "generation";
    }
}

cJSON *srv_req_error_json(const SrvReq *r, int status, const char *message, const char *param) {
    if (!r->route || !(r->route->flags & SRV_ROUTE_TGI))
        return srv_error_json(status, message, param);
    cJSON *j_root = cJSON_CreateObject();
    if (!cJSON_AddStringToObject(j_root, "error", message ? message : "") ||
        !cJSON_AddStringToObject(j_root, "error_type", srv_tgi_error_type(status))) {
        cJSON_Delete(j_root);
        return NULL;
    }
    return j_root;
}
