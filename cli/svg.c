/* Standalone SVG line plots (see svg.h). */
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ML 78 /* margins: left, right, top, bottom */
#define MR 16
#define MT 34
#define MB 48

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

/* One axis: data range [lo, hi] mapped onto pixels [p0, p1], linear or log10. */
typedef struct axis {
    double lo, hi;
    int log;
    double p0, p1;
} axis;

static double axis_value(const axis *a, double v) { return a->log ? log10(v) : v; }

static double axis_px(const axis *a, double v) {
    double lo = axis_value(a, a->lo), hi = axis_value(a, a->hi);
    return a->p0 + (axis_value(a, v) - lo) / (hi - lo) * (a->p1 - a->p0);
}

static int usable(const axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }

/* Fits the axis range to the data (and to the bands, for x), padding linear axes. */
static void axis_fit(axis *a, const svg_plot *p, int is_x) {
    double lo = INFINITY, hi = -INFINITY;
    for (int s = 0; s < p->nseries; s++)
        for (int i = 0; i < p->series[s].n; i++) {
            double v = is_x ? p->series[s].x[i] : p->series[s].y[i];
            double other = is_x ? p->series[s].y[i] : p->series[s].x[i];
            if (!usable(a, v) || !isfinite(other)) continue;
            lo = fmin(lo, v);
            hi = fmax(hi, v);
        }
    for (int b = 0; is_x && b < p->nbands; b++) {
        if (usable(a, p->bands[b].x0)) lo = fmin(lo, p->bands[b].x0);
        if (usable(a, p->bands[b].x1)) hi = fmax(hi, p->bands[b].x1);
    }
    if (!(lo <= hi)) lo = a->log ? 1 : 0, hi = a->log ? 10 : 1;
    if (a->log) {
        if (hi / lo < 1.5) lo /= 1.25, hi *= 1.25;
    } else {
        if (!is_x && lo > 0 && lo < 0.25 * hi) lo = 0; /* y from zero when that loses little */
        double pad = hi > lo ? 0.04 * (hi - lo) : fmax(fabs(hi) * 0.1, 1.0);
        if (!is_x) hi += pad, lo = lo == 0 ? 0 : lo - pad;
        if (hi == lo) hi = lo + pad;
    }
    a->lo = lo;
    a->hi = hi;
}

/* Tick values: 1-2-5 steps on linear axes; powers of ten (with 2 and 5 between when the
 * range spans few decades) on log axes. Returns the count. */
static int axis_ticks(const axis *a, double *t, int max) {
    int n = 0;
    if (a->log) {
        int d0 = (int)floor(log10(a->lo)), d1 = (int)ceil(log10(a->hi));
        int fine = d1 - d0 <= 3;
        for (int d = d0; d <= d1 && n < max; d++)
            for (int k = 0; k < 3; k++) {
                double v = (k == 0 ? 1 : k == 1 ? 2 : 5) * pow(10, d);
                if ((k == 0 || fine) && v >= a->lo * 0.999 && v <= a->hi * 1.001 && n < max) t[n++] = v;
            }
        return n;
    }
    double raw = (a->hi - a->lo) / 6, mag = pow(10, floor(log10(raw))), step = mag;
    if (raw / mag > 5) step = 10 * mag;
    else if (raw / mag > 2) step = 5 * mag;
    else if (raw / mag > 1) step = 2 * mag;
    for (double v = ceil(a->lo / step) * step; v <= a->hi + 1e-9 * step && n < max; v += step)
        t[n++] = fabs(v) < 1e-12 * step ? 0 : v;
    return n;
}

static void tick_label(char *buf, size_t n, double v) {
    double a = fabs(v);
    if (a >= 1e6 || (a > 0 && a < 1e-3)) snprintf(buf, n, "%.3g", v);
    else snprintf(buf, n, "%g", v);
}

static void text_escaped(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

static void draw_axes(FILE *f, const svg_plot *p, const axis *x, const axis *y, int W, int H) {
    double t[64];
    char lab[32];
    int n = axis_ticks(x, t, 64);
    for (int i = 0; i < n; i++) {
        double px = axis_px(x, t[i]);
        tick_label(lab, sizeof lab, t[i]);
        fprintf(f, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' stroke='#ddd'/>\n", px, MT, px, H - MB);
        fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle'>%s</text>\n", px, H - MB + 16, lab);
    }
    n = axis_ticks(y, t, 64);
    for (int i = 0; i < n; i++) {
        double py = axis_px(y, t[i]);
        tick_label(lab, sizeof lab, t[i]);
        fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#ddd'/>\n", ML, py, W - MR, py);
        fprintf(f, "<text x='%d' y='%.1f' text-anchor='end'>%s</text>\n", ML - 6, py + 4, lab);
    }
    fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#333'/>\n", ML, MT, W - ML - MR, H - MT - MB);
    fprintf(f, "<text x='%d' y='%d' text-anchor='middle'>", (ML + W - MR) / 2, H - 10);
    text_escaped(f, p->xlabel);
    fprintf(f, "</text>\n<text transform='translate(16,%d) rotate(-90)' text-anchor='middle'>", (MT + H - MB) / 2);
    text_escaped(f, p->ylabel);
    fprintf(f, "</text>\n<text x='%d' y='22' text-anchor='middle' font-size='15'>", W / 2);
    text_escaped(f, p->title);
    fputs("</text>\n", f);
}

static void draw_bands(FILE *f, const svg_plot *p, const axis *x, int H) {
    for (int b = 0; b < p->nbands; b++) {
        const svg_band *bd = &p->bands[b];
        if (!usable(x, bd->x0) || !usable(x, bd->x1)) continue;
        double a = axis_px(x, bd->x0), c = axis_px(x, bd->x1);
        fprintf(f, "<rect x='%.1f' y='%d' width='%.1f' height='%d' fill='%s'/>\n", a, MT, c - a, H - MT - MB,
                bd->color ? bd->color : "#eef");
        if (bd->label) {
            fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle' fill='#555'>", (a + c) / 2, H - MB - 8);
            text_escaped(f, bd->label);
            fputs("</text>\n", f);
        }
    }
}

static void draw_series(FILE *f, const svg_series *s, const char *color, const axis *x, const axis *y) {
    int open = 0;
    for (int i = 0; i < s->n; i++) {
        if (!usable(x, s->x[i]) || !usable(y, s->y[i])) {
            if (open) fputs("'/>\n", f);
            open = 0;
            continue;
        }
        if (!open)
            fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.8'%s points='", color,
                    s->dashed ? " stroke-dasharray='6,4'" : "");
        fprintf(f, "%.1f,%.1f ", axis_px(x, s->x[i]), axis_px(y, s->y[i]));
        open = 1;
    }
    if (open) fputs("'/>\n", f);
    for (int i = 0; s->markers && i < s->n; i++)
        if (usable(x, s->x[i]) && usable(y, s->y[i]))
            fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n", axis_px(x, s->x[i]), axis_px(y, s->y[i]), color);
}

static void draw_legend(FILE *f, const svg_plot *p, int W) {
    int rows = 0;
    for (int s = 0; s < p->nseries; s++) rows += p->series[s].label != NULL;
    if (rows)
        fprintf(f, "<rect x='%d' y='%d' width='184' height='%d' fill='white' fill-opacity='0.85' stroke='#bbb'/>\n",
                W - MR - 196, MT + 4, 18 * p->nseries + 6);
    for (int s = 0; s < p->nseries; s++) {
        if (!p->series[s].label) continue;
        int yy = MT + 16 + 18 * s, xx = W - MR - 190;
        const char *c = palette[s % (int)(sizeof palette / sizeof *palette)];
        fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' stroke-width='2.5'%s/>\n", xx, yy - 4, xx + 22,
                yy - 4, c, p->series[s].dashed ? " stroke-dasharray='6,4'" : "");
        fprintf(f, "<text x='%d' y='%d'>", xx + 28, yy);
        text_escaped(f, p->series[s].label);
        fputs("</text>\n", f);
    }
}

int svg_write(const char *path, const svg_plot *p) {
    int W = p->width > 0 ? p->width : 720, H = p->height > 0 ? p->height : 420;
    axis x = {0, 1, p->logx, ML, W - MR}, y = {0, 1, p->logy, H - MB, MT};
    axis_fit(&x, p, 1);
    axis_fit(&y, p, 0);

    size_t n = strlen(path) + 8;
    char *tmp = malloc(n);
    if (!tmp) return -1;
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(tmp);
        return -1;
    }
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' viewBox='0 0 %d %d' "
               "font-family='sans-serif' font-size='12'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            W, H, W, H);
    draw_bands(f, p, &x, H);
    draw_axes(f, p, &x, &y, W, H);
    for (int s = 0; s < p->nseries; s++)
        draw_series(f, &p->series[s], palette[s % (int)(sizeof palette / sizeof *palette)], &x, &y);
    draw_legend(f, p, W);
    fputs("</svg>\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    int err = errno;
    if (bad || rename(tmp, path) != 0) {
        err = bad ? (err ? err : EIO) : errno;
        remove(tmp);
        free(tmp);
        errno = err;
        return -1;
    }
    free(tmp);
    return 0;
}
