/* Error reporting inside the library: three tiers.
 *  - an internal invariant fails        -> HG_ASSERT (file, line), a bug in handgrad;
 *  - the environment fails (file, oneDNN) -> hg_fail(HG_ERR_IO / HG_ERR_BACKEND, ...);
 *  - the user is wrong                  -> hg_fail(HG_ERR_INVALID, "field: ...").
 * hg_fail records a message for hg_last_error() on this thread and returns the status,
 * so call sites read `return hg_fail(HG_ERR_INVALID, "n_head: ...")`. */
#ifndef HG_CORE_ERROR_H
#define HG_CORE_ERROR_H

#include <assert.h>
#include <stdarg.h>
#include "handgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define HG_PRINTF(a, b)
#endif

hg_status hg_fail(hg_status status, const char *fmt, ...) HG_PRINTF(2, 3);
hg_status hg_vfail(hg_status status, const char *fmt, va_list ap) HG_PRINTF(2, 0);
void hg_clear_error(void);
/* The failing status st of a kernel or user callback, restated with what returned it:
 * "<fmt...> returned '<status name>'", then the message the callee left, if any (so clear
 * the error before the call). A status outside hg_status becomes HG_ERR_BACKEND. */
hg_status hg_fail_returned(hg_status st, const char *fmt, ...) HG_PRINTF(2, 3);

/* Propagate a failing status without adding a message. */
#define HG_TRY(expr)                      \
    do {                                  \
        hg_status hg_try_s_ = (expr);     \
        if (hg_try_s_ != HG_OK) return hg_try_s_; \
    } while (0)

#define HG_ASSERT(cond) assert(cond)

#ifdef __cplusplus
}
#endif

#endif
