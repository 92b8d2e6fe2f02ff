/* Double-precision reference ops for test_ops (see ops_reference.h). */
#include "ops_reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ref_dropout_scale(const hg_dropout *d, uint64_t i) {
    if (!hg_dropout_on(d)) return 1.0;
    return hg_dropout_scale(d, i) == 0.0f ? 0.0 : 1.0 / (1.0 - (double)d->p);
}

void ref_encoder_forward(double *out, const int32_t *tokens, const double *wte, const double *wpe,
                         int B, int T, int C, double scale, const hg_dropout *drop) {
    for (int n = 0; n < B * T; n++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            out[i] = (scale * wte[(size_t)tokens[n] * C + c] + wpe[(size_t)(n % T) * C + c]) * ref_dropout_scale(drop, i);
        }
}

void ref_norm_row(double *out, double *mean, double *rstd, const double *x, const double *w,
                  const double *b, int C, const hg_norm_spec *ns) {
    double m = 0.0, var = 0.0;
    if (!ns->rms) {
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
    }
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;
    double s = 1.0 / sqrt(var + (double)ns->eps);
    for (int c = 0; c < C; c++) out[c] = (x[c] - m) * s * (w ? w[c] : 1.0) + (b ? b[c] : 0.0);
    *mean = m;
    *rstd = s;
}

/* With xh = (x - m) s and g = dout w: dinp = s (g - mean(g) - xh mean(g xh)); RMSNorm
 * has m = 0 and no mean(g) term (its output does not subtract a mean). */
void ref_norm_backward(double *dinp, double *dw, double *db, const double *dout, const double *inp,
                       const double *w, int N, int C, const hg_norm_spec *ns) {
    double *xh = malloc(sizeof(double) * (size_t)C), *tmp = malloc(sizeof(double) * (size_t)C);
    for (int c = 0; c < C; c++) {
        if (dw) dw[c] = 0.0;
        if (db) db[c] = 0.0;
    }
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        double m, s, mg = 0.0, mgx = 0.0;
        ref_norm_row(tmp, &m, &s, x, NULL, NULL, C, ns);
        for (int c = 0; c < C; c++) {
            double g = dy[c] * (w ? w[c] : 1.0);
            xh[c] = (x[c] - m) * s;
            mg += g;
            mgx += g * xh[c];
        }
        mg = ns->rms ? 0.0 : mg / C;
        mgx /= C;
        for (int c = 0; c < C; c++) {
            dinp[(size_t)n * C + c] = s * (dy[c] * (w ? w[c] : 1.0) - mg - xh[c] * mgx);
            if (dw) dw[c] += dy[c] * xh[c];
            if (db) db[c] += dy[c];
        }
    }
    free(xh);
    free(tmp);
}

void ref_norm_scale(double *scale, const double *x, const double *mean, const double *rstd, const double *w,
                    const double *b, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            scale[n * C + c] = (fabs(x[n * C + c]) + fabs(mean[n])) * rstd[n] * (w ? fabs(w[c]) : 1.0) + (b ? fabs(b[c]) : 0.0);
}

static double norm_loss_rows(const ref_norm_fd *c, int n0, int n1) {
    double L = 0.0, m, s;
    for (int n = n0; n < n1; n++) {
        ref_norm_row(c->row, &m, &s, c->x + (size_t)n * c->C, c->w, c->b, c->C, c->ns);
        for (int j = 0; j < c->C; j++) L += c->row[j] * c->R[(size_t)n * c->C + j];
    }
    return L;
}
double ref_norm_loss_row(void *ctx, size_t i) {
    const ref_norm_fd *c = ctx;
    return norm_loss_rows(c, (int)(i / c->C), (int)(i / c->C) + 1);
}
double ref_norm_loss_all(void *ctx, size_t i) {
    (void)i;
    const ref_norm_fd *c = ctx;
    return norm_loss_rows(c, 0, c->N);
}

double ref_residual_norm_loss(void *ctx, size_t i) {
    const ref_residual_norm_fd *c = ctx;
    size_t o = i / c->C * c->C;
    double L = 0.0, m, s;
    for (int j = 0; j < c->C; j++) {
        c->sum[j] = c->res[o + j] + c->delta[o + j] * ref_dropout_scale(c->drop, o + j);
        L += c->sum[j] * c->R2[o + j];
    }
    ref_norm_row(c->row, &m, &s, c->sum, c->w, c->b, c->C, c->ns);
    for (int j = 0; j < c->C; j++) L += c->row[j] * c->R1[o + j];
    return L;
}

void ref_matmul_forward(double *out, double *mag, const double *inp, const double *w,
                        const double *bias, int M, int K, int N) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = bias ? bias[n] : 0.0, a = bias ? fabs(bias[n]) : 0.0;
            for (int k = 0; k < K; k++) {
                acc += inp[(size_t)m * K + k] * w[(size_t)k * N + n];
                a += fabs(inp[(size_t)m * K + k] * w[(size_t)k * N + n]);
            }
            out[(size_t)m * N + n] = acc;
            if (mag) mag[(size_t)m * N + n] = a;
        }
}

void ref_matmul_backward(double *dinp, double *dw, double *dbias, const double *dout,
                         const double *inp, const double *w, int M, int K, int N) {
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            double acc = 0.0;
            for (int n = 0; n < N; n++) acc += dout[(size_t)m * N + n] * w[(size_t)k * N + n];
            dinp[(size_t)m * K + k] = acc;
        }
    for (size_t i = 0; i < (size_t)K * N; i++) dw[i] = 0.0;
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) dw[(size_t)k * N + n] += inp[(size_t)m * K + k] * dout[(size_t)m * N + n];
    if (dbias)
        for (int n = 0; n < N; n++) {
            dbias[n] = 0.0;
            for (int m = 0; m < M; m++) dbias[n] += dout[(size_t)m * N + n];
        }
}

#define GELU_K 0.79788456080286535588 /* sqrt(2/pi) */
#define GELU_A 0.044715

double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(GELU_K * (x + GELU_A * x * x * x))); }

double ref_gelu_grad(double x) {
    double th = tanh(GELU_K * (x + GELU_A * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
}

double ref_silu(double x) { return x / (1.0 + exp(-x)); }

double ref_silu_grad(double x) {
    double sg = 1.0 / (1.0 + exp(-x));
    return sg * (1.0 + x * (1.0 - sg));
}

void ref_rope_table(float *cos_sin, int Tmax, int hs, float theta) {
    const int half = hs / 2;
    for (int i = 0; i < half; i++) {
        float f = 1.0f / powf(theta, (float)(2 * i) / (float)hs);
        for (int t = 0; t < Tmax; t++) {
            double a = (double)t * (double)f;
            cos_sin[(size_t)t * hs + i] = (float)cos(a);
            cos_sin[(size_t)t * hs + half + i] = (float)sin(a);
        }
    }
}

void ref_rope(double *qkv, const float *cos_sin, const hg_rope_shape *s, int inverse) {
    const int hs = s->hs, rot = s->rot ? s->rot : hs, half = rot / 2, W = (s->NH + 2 * s->NKV) * hs;
    for (int b = 0; b < s->B; b++)
        for (int t = 0; t < s->T; t++) {
            const float *row = cos_sin + (size_t)(s->pos0 + t) * rot;
            double *x = qkv + ((size_t)b * s->T + t) * W;
            for (int h = 0; h < s->NH + s->NKV; h++) /* the q heads, then the k heads */
                for (int i = 0; i < half; i++) {
                    double c = row[i], sn = inverse ? -(double)row[half + i] : row[half + i];
                    double x1 = x[h * hs + i], x2 = x[h * hs + half + i];
                    x[h * hs + i] = x1 * c - x2 * sn;
                    x[h * hs + half + i] = x2 * c + x1 * sn;
                }
        }
}

/* Keys query t may see: all T, or 0..t when causal. */
static int keys_seen(const hg_attention_shape *s, int t) { return s->causal ? t + 1 : s->T; }

void ref_attention_row(double *out, double *lse, const double *qkv, const hg_attention_shape *s,
                       int b, int h, int t) {
    const int T = s->T, hs = s->hs, nk = keys_seen(s, t), lo = hg_attention_first_key(s, b, t);
    const int NKV = s->NKV ? s->NKV : s->NH, W = (s->NH + 2 * NKV) * hs, g = h / (s->NH / NKV);
    const int k0 = s->NH * hs + g * hs, v0 = (s->NH + NKV) * hs + g * hs;
    const double scale = 1.0 / sqrt((double)hs);
    const double *q = qkv + ((size_t)b * T + t) * W + h * hs;
    double *p = malloc(sizeof(double) * (size_t)nk), mx = -INFINITY, sum = 0.0;
    for (int j = lo; j < nk; j++) {
        const double *k = qkv + ((size_t)b * T + j) * W + k0;
        double dot = 0.0;
        for (int d = 0; d < hs; d++) dot += q[d] * k[d];
        p[j] = s->softcap > 0 ? s->softcap * tanh(dot * scale / s->softcap) : dot * scale;
        if (p[j] > mx) mx = p[j];
    }
    for (int j = lo; j < nk; j++) sum += (p[j] = exp(p[j] - mx));
    for (int d = 0; d < hs; d++) out[d] = 0.0;
    for (int j = lo; j < nk; j++) {
        const double *v = qkv + ((size_t)b * T + j) * W + v0;
        for (int d = 0; d < hs; d++) out[d] += p[j] / sum * v[d];
    }
    *lse = mx + log(sum);
    free(p);
}

void ref_attention_forward(double *out, double *lse, const double *qkv, const hg_attention_shape *s) {
    const int T = s->T, hs = s->hs, C = s->NH * hs;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++)
            for (int t = 0; t < T; t++)
                ref_attention_row(out + ((size_t)b * T + t) * C + h * hs, &lse[((size_t)b * s->NH + h) * T + t], qkv, s, b, h, t);
}

void ref_attention_backward(double *dqkv, const double *dout, const double *qkv,
                            const hg_attention_shape *s) {
    const int T = s->T, hs = s->hs, C = s->NH * hs;
    const int NKV = s->NKV ? s->NKV : s->NH, W = (s->NH + 2 * NKV) * hs, vk = NKV * hs; /* v - k */
    const double scale = 1.0 / sqrt((double)hs);
    double *P = malloc(sizeof(double) * (size_t)T), *dP = malloc(sizeof(double) * (size_t)T);
    double *dz = malloc(sizeof(double) * (size_t)T);
    double *o = malloc(sizeof(double) * (size_t)hs);
    memset(dqkv, 0, sizeof(double) * (size_t)s->B * T * W);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++)
            for (int t = 0; t < T; t++) {
                const int k0 = s->NH * hs + h / (s->NH / NKV) * hs; /* kv head of h */
                const size_t row = ((size_t)b * T + t) * W + h * hs;
                const double *q = qkv + row, *g = dout + ((size_t)b * T + t) * C + h * hs;
                double lse, D = 0.0;
                int nk = keys_seen(s, t), lo = hg_attention_first_key(s, b, t);
                ref_attention_row(o, &lse, qkv, s, b, h, t);
                for (int j = lo; j < nk; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * W + k0, *v = k + vk;
                    double dot = 0.0, dpv = 0.0;
                    for (int d = 0; d < hs; d++) dot += q[d] * k[d], dpv += g[d] * v[d];
                    double z = dot * scale, t = s->softcap > 0 ? tanh(z / s->softcap) : 0.0;
                    P[j] = exp((s->softcap > 0 ? s->softcap * t : z) - lse);
                    dP[j] = dpv;
                    dz[j] = s->softcap > 0 ? 1.0 - t * t : 1.0; /* the cap's derivative */
                    D += P[j] * dpv;
                }
                for (int j = lo; j < nk; j++) {
                    const size_t krow = ((size_t)b * T + j) * W + k0;
                    double ds = P[j] * (dP[j] - D) * dz[j] * scale;
                    for (int d = 0; d < hs; d++) {
                        dqkv[row + d] += ds * qkv[krow + d];
                        dqkv[krow + d] += ds * q[d];
                        dqkv[krow + vk + d] += P[j] * g[d];
                    }
                }
            }
    free(P);
    free(dP);
    free(dz);
    free(o);
}

void ref_logits_row(double *z, const double *x, const double *wte, int V, int C) {
    for (int v = 0; v < V; v++) {
        double acc = 0.0;
        for (int c = 0; c < C; c++) acc += x[c] * wte[(size_t)v * C + c];
        z[v] = acc;
    }
}

static double row_lse(const double *z, int V) {
    double mx = -INFINITY, sum = 0.0;
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < V; v++) sum += exp(z[v] - mx);
    return mx + log(sum);
}

double ref_row_loss(const double *z, int V, int target) {
    return target < 0 ? 0.0 : row_lse(z, V) - z[target];
}

void ref_classifier_backward(double *dx, double *dwte, const double *x, const double *wte,
                             const int32_t *targets, int N, int C, int V, int Vp, double dscale) {
    double *z = malloc(sizeof(double) * (size_t)V);
    memset(dx, 0, sizeof(double) * (size_t)N * C);
    memset(dwte, 0, sizeof(double) * (size_t)Vp * C);
    for (int n = 0; n < N; n++) {
        if (targets[n] < 0) continue;
        const double *xr = x + (size_t)n * C;
        ref_logits_row(z, xr, wte, V, C);
        double lse = row_lse(z, V);
        for (int v = 0; v < V; v++) {
            double dz = (exp(z[v] - lse) - (v == targets[n])) * dscale;
            for (int c = 0; c < C; c++) {
                dx[(size_t)n * C + c] += dz * wte[(size_t)v * C + c];
                dwte[(size_t)v * C + c] += dz * xr[c];
            }
        }
    }
    free(z);
}

void ref_adamw(double *p, double *m, double *v, const float *g, size_t n, const hg_adamw_update *u) {
    const double b1 = u->beta1, b2 = u->beta2;
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * u->grad_scale;
        p[i] -= (double)u->lr * u->weight_decay * p[i];
        m[i] = b1 * m[i] + (1.0 - b1) * gi;
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        p[i] -= ((double)u->lr / u->bias_correction1) * m[i] / (sqrt(v[i]) / sqrt((double)u->bias_correction2) + u->eps);
    }
}
