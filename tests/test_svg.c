/* The CLI's SVG plot writer and output-path check: a plot lands whole (every series, gaps
 * for non-finite points, bands, escaped text), a bad path fails without leaving files. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cli_io.h"
#include "svg.h"

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

int main(void) {
    char dir[] = "/tmp/hg_svg_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/plot.svg", dir);
    snprintf(bad, sizeof bad, "%s/missing/plot.svg", dir);

    double x[6] = {256, 512, 1024, 2048, 4096, 8192};
    double a[6] = {1, 2, 4, 8, 16, 32}, b[6] = {1.5, NAN, 6, 12, INFINITY, 50};
    svg_series s[2] = {{"handgrad <fast>", x, a, 6, 0, 1}, {"torch & co", x, b, 6, 1, 0}};
    svg_band band = {300, 900, "backward", "#fee"};
    svg_plot p = {.title = "t", .xlabel = "T", .ylabel = "ms", .logx = 1, .logy = 1,
                  .series = s, .nseries = 2, .bands = &band, .nbands = 1};
    CHECK(svg_write(path, &p) == 0);
    char *svg = check_slurp(path);
    CHECK(svg != NULL);
    if (svg) {
        CHECK(strncmp(svg, "<svg ", 5) == 0 && strstr(svg, "</svg>") != NULL);
        /* series 1 is one line; series 2 breaks at NaN and at Inf: 3 pieces */
        CHECK(count(svg, "<polyline") == 4);
        CHECK(count(svg, "<circle") == 6);
        CHECK(strstr(svg, "handgrad &lt;fast&gt;") != NULL && strstr(svg, "torch &amp; co") != NULL);
        CHECK(strstr(svg, "backward") != NULL && strstr(svg, "stroke-dasharray") != NULL);
        CHECK(strstr(svg, ">1000<") != NULL); /* a decade tick on the log x axis */
        CHECK(strstr(svg, "nan") == NULL && strstr(svg, "inf") == NULL);
    }
    free(svg);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);

    /* a path whose directory is missing: an error, and nothing written */
    errno = 0;
    CHECK(svg_write(bad, &p) == -1 && errno == ENOENT);
    CHECK(cli_check_writable("test", "--plot", bad) == 1);
    CHECK(cli_check_writable("test", "--plot", dir) == 1);
    CHECK(cli_check_writable("test", "--plot", path) == 0);

    remove(path);
    rmdir(dir);
    CHECK_DONE();
}
