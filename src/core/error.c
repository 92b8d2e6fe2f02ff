/* Thread-local last-error message, as errno is thread-local: each thread sees the
 * message of its own last failing call. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

hg_status hg_vfail(hg_status status, const char *fmt, va_list ap) {
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    return status;
}

hg_status hg_fail(hg_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hg_vfail(status, fmt, ap);
    va_end(ap);
    return status;
}

void hg_clear_error(void) { last_error[0] = '\0'; }

hg_status hg_fail_returned(hg_status st, const char *fmt, ...) {
    char what[256], why[sizeof last_error];
    snprintf(why, sizeof why, "%s", last_error);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (st < HG_ERR_INVALID || st > HG_ERR_STATE) st = HG_ERR_BACKEND;
    return hg_fail(st, "%s returned '%s'%s%s", what, hg_status_name(st), *why ? ": " : "", why);
}

const char *hg_last_error(void) { return last_error; }

const char *hg_status_name(hg_status s) {
    switch (s) {
    case HG_OK: return "ok";
    case HG_ERR_INVALID: return "invalid argument";
    case HG_ERR_NOMEM: return "out of memory";
    case HG_ERR_IO: return "i/o error";
    case HG_ERR_FORMAT: return "bad file format";
    case HG_ERR_UNSUPPORTED: return "unsupported";
    case HG_ERR_BACKEND: return "backend failure";
    case HG_ERR_STATE: return "wrong state";
    }
    return "unknown status";
}

const char *hg_version(void) { return HG_VERSION_STRING; }
