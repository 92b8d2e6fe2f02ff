/* Ops of one's own at the decoder's sites (handgrad_ext.h: hg_site_op; the step calls
 * them through model/site.c). Their contract is the public header's. The profiler
 * prints each row under the op's registered name ("<name> forward"); these names stand
 * when no model is attached. A row per site and pass, site-major, in the order of
 * hg_site and gpt_site_pass (model/gpt.h). Their cost counts the bytes of x, y and
 * (backward) dy and dx once; their FLOPs are unknown. */
#ifndef HG_OPS_SITE_H
#define HG_OPS_SITE_H

#define HG_SITE_OPS(X)                                                     \
    X(SITE_ATTN_FWD, "op_attn_proj forward", FORWARD, MEMORY)              \
    X(SITE_ATTN_RECOMPUTE, "op_attn_proj recompute", BACKWARD, MEMORY)     \
    X(SITE_ATTN_BWD, "op_attn_proj backward", BACKWARD, MEMORY)            \
    X(SITE_MLP_FWD, "op_mlp_act forward", FORWARD, MEMORY)                 \
    X(SITE_MLP_RECOMPUTE, "op_mlp_act recompute", BACKWARD, MEMORY)        \
    X(SITE_MLP_BWD, "op_mlp_act backward", BACKWARD, MEMORY)               \
    X(SITE_FINAL_FWD, "op_final_norm forward", FORWARD, MEMORY)            \
    X(SITE_FINAL_RECOMPUTE, "op_final_norm recompute", BACKWARD, MEMORY)   \
    X(SITE_FINAL_BWD, "op_final_norm backward", BACKWARD, MEMORY)

#endif
