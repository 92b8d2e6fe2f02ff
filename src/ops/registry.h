/* The op registry: every op kind the step runs, gathered from the rows each op header
 * lists beside its contract (ops/cost.h says how a row reads). The profiler's kinds
 * (profile/profile.h) and its table of names, passes and rates (profile.c) are made from
 * this list; an op's cost for a call comes from the functions in the same header, and
 * its scratch size from the backend entry its contract declares (the memory plan,
 * model/gpt.c, asks it once at model creation). A new op adds its header's rows here. */
#ifndef HG_OPS_REGISTRY_H
#define HG_OPS_REGISTRY_H

#include "ops/activation.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/classifier.h"
#include "ops/cost.h"
#include "ops/encoder.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/lora.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "ops/site.h"

/* The backend's memory primitive `zero`, timed where the step clears gradients: the
 * residual gradient at the start of backward, a post norm's input gradient before its
 * backward adds into it, all parameter gradients before a step. */
#define HG_ZERO_OPS(X)                                  \
    X(ZERO_DRES, "zero dresidual", BACKWARD, MEMORY)    \
    X(ZERO_DPOST, "zero dpost", BACKWARD, MEMORY)       \
    X(ZERO_GRAD, "zero_grad", OPTIMIZER, MEMORY)

static inline hg_op_cost hg_zero_cost(size_t bytes) {
    hg_op_cost c = {0.0, (double)bytes};
    return c;
}

#define HG_OP_REGISTRY(X) \
    HG_ENCODER_OPS(X)     \
    HG_NORM_OPS(X)        \
    HG_MATMUL_OPS(X)      \
    HG_LORA_OPS(X)        \
    HG_GELU_OPS(X)        \
    HG_ACTIVATION_OPS(X)  \
    HG_ROPE_OPS(X)        \
    HG_ATTENTION_OPS(X)   \
    HG_CLASSIFIER_OPS(X)  \
    HG_SITE_OPS(X)        \
    HG_ZERO_OPS(X)        \
    HG_ADAMW_OPS(X)

#endif
