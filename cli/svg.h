/* Line plots as standalone SVG files: the loss curve, the bench ladder and attention sweep,
 * the memory timeline. One call draws axes, ticks, a legend, any number of series and
 * optional shaded x ranges (forward/backward phases, say). */
#ifndef HG_CLI_SVG_H
#define HG_CLI_SVG_H

typedef struct svg_series {
    const char *label;
    const double *x, *y; /* (n) points; a non-finite y leaves a gap */
    int n;
    int dashed;          /* 1: dashed line (a reference series) */
    int markers;         /* 1: a dot on each point */
} svg_series;

typedef struct svg_band {
    double x0, x1;       /* shaded x range, in data units */
    const char *label;   /* written at the top of the band */
    const char *color;   /* CSS colour, e.g. "#eef" */
} svg_band;

typedef struct svg_plot {
    const char *title, *xlabel, *ylabel;
    int logx, logy;      /* logarithmic axis (all values must then be > 0) */
    const svg_series *series;
    int nseries;
    const svg_band *bands;
    int nbands;
    int width, height;   /* pixels; 0 picks 720 x 420 */
} svg_plot;

/* Writes the plot to `path` through a temporary file renamed into place, so a reader
 * never sees half a file. Returns 0, or -1 with errno set. */
int svg_write(const char *path, const svg_plot *p);

#endif
