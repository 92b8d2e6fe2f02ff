/* The option tables of the commands (cli/cli_opts.c), on a table of every type: values
 * land in their fields; each bad value, unknown option, missing value and stray operand
 * is one line naming the option, status CLI_USAGE, and leaves the rest unparsed;
 * --help lists the options wrapped within 80 columns with the settings' own defaults;
 * a JSON config sets the same fields and the saved ones print back to the same JSON. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cli_opts.h"

typedef struct settings {
    const char *name, *kind, *prompt;
    int count, flag, mode;
    int64_t big;
    double rate, open;
    cli_ints sizes;
    cli_strs stops;
} settings;

#define O(f) offsetof(settings, f)
static const cli_opt table[] = {
    {"Things", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"name", CLI_STR, O(name), "NAME", 0, 0, CLI_SAVED, "a name"},
    {"kind", CLI_CHOICE, O(kind), "red|green|blue", 0, 0, CLI_SAVED, "a colour"},
    {"prompt", CLI_STR, O(prompt), "TEXT", 0, 0, CLI_TEXT, "any text"},
    {"count", CLI_INT, O(count), "N", 1, 100, CLI_SAVED, "how many"},
    {"big", CLI_I64, O(big), "N", 0, 9.2e18, CLI_SAVED, "a large number"},
    {"Other", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"rate", CLI_F64, O(rate), "R", 0, 1, CLI_SAVED | CLI_SHOW0, "a rate"},
    {"open", CLI_F64, O(open), "X", 0, 10, CLI_LO_OPEN, "above zero (default: whatever)"},
    {"flag", CLI_BOOL, O(flag), 0, 0, 1, CLI_SAVED, "a switch"},
    {"json", CLI_SET, O(mode), 0, 2, 0, CLI_ARGV, "mode 2"},
    {"old-count", CLI_INT, O(count), "N", 1, 100, CLI_HIDDEN, "--count"},
    {"sizes", CLI_INTS, O(sizes), "LIST", 16, 4096, 0,
     "a list of sizes, with a help text long enough that it has to wrap over more than one line of the help"},
    {"stop", CLI_STRS, O(stops), "TEXT", 0, 0, CLI_TEXT, "repeatable"},
};
#undef O

static settings defaults(void) { return (settings){.name = "x", .kind = "red", .count = 3, .rate = 0}; }

/* Runs cli_parse on the words of `line` with stderr captured into err (one string). */
static int parse(const char *line, settings *s, int *operands, char *err, size_t cap) {
    static char buf[1024];
    char *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "test %s", line);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && argc < 31; w = strtok_r(NULL, " ", &save))
        argv[argc++] = strcmp(w, "''") ? w : "";
    argv[argc] = NULL;
    cli_cmd cmd = CLI_CMD("test", "usage: test [options]\n", NULL, NULL, table, operands ? "FILE..." : NULL);
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    int rc = cli_parse(&cmd, s, argc, argv, operands);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, cap - 1, tmp);
    err[n] = 0;
    fclose(tmp);
    return rc;
}

static void test_values(void) {
    settings s = defaults();
    char err[512];
    int ops;
    CHECK(parse("--name bob --kind=blue --count 7 --big 9000000000000 --rate 0.25 --open 0.5 --flag --json "
                "--sizes 16,32,64 --stop a --stop -- --prompt --odd f1 f2",
                &s, &ops, err, sizeof err) == 0);
    CHECK(!strcmp(s.name, "bob") && !strcmp(s.kind, "blue") && s.count == 7 && s.big == 9000000000000LL);
    CHECK(s.rate == 0.25 && s.open == 0.5 && s.flag == 1 && s.mode == 2 && !strcmp(s.prompt, "--odd"));
    CHECK(s.sizes.n == 3 && s.sizes.v[0] == 16 && s.sizes.v[2] == 64);
    CHECK(s.stops.n == 2 && !strcmp(s.stops.v[0], "a") && !strcmp(s.stops.v[1], "--"));
    CHECK(ops == 22 && !err[0]); /* f1 is argv[22]: options come first after getopt's permutation */
    s = defaults();
    CHECK(parse("--old-count 9", &s, NULL, err, sizeof err) == 0 && s.count == 9);
}

static void test_errors(void) {
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"--count 0", "handgrad test: --count: '0' is not an integer in [1, 100]\n"},
        {"--count 3x", "handgrad test: --count: '3x' is not an integer in [1, 100]\n"},
        {"--old-count 101", "handgrad test: --old-count: '101' is not an integer in [1, 100]\n"},
        {"--big -1", "handgrad test: --big: '-1' is not an integer in [0, 9200000000000000000]\n"},
        {"--rate 1.5", "handgrad test: --rate: '1.5' is not a number in [0, 1]\n"},
        {"--rate nan", "handgrad test: --rate: 'nan' is not a number in [0, 1]\n"},
        {"--open 0", "handgrad test: --open: '0' is not a number in (0, 10]\n"},
        {"--kind pink", "handgrad test: --kind: 'pink' is not red, green or blue\n"},
        {"--sizes 16,,32", "handgrad test: --sizes: '' is not an integer in [16, 4096]\n"},
        {"--sizes 16,8", "handgrad test: --sizes: '8' is not an integer in [16, 4096]\n"},
        {"--sizes 16,16,16,16,16,16,16,16,16,16,16,16,16,16,16,16,16", "handgrad test: --sizes: at most 16 values\n"},
        {"--colour red", "handgrad test: unknown option '--colour' (see handgrad test --help)\n"},
        {"--count", "handgrad test: option '--count' needs a value (see handgrad test --help)\n"},
        {"--name --flag", "handgrad test: option '--name' needs a value, not '--flag'\n"},
        {"--flag=1", "handgrad test: option '--flag' takes no value (see handgrad test --help)\n"},
        {"--count 2 extra", "handgrad test: unexpected argument 'extra' (options are --name value)\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        settings s = defaults();
        char err[512];
        int rc = parse(cases[i].args, &s, NULL, err, sizeof err);
        if (rc != CLI_USAGE || strcmp(err, cases[i].want)) {
            fprintf(stderr, "'%s': status %d, message '%s', want '%s'\n", cases[i].args, rc, err, cases[i].want);
            check_failures++;
        }
    }
    settings s = defaults();
    char err[512];
    CHECK(parse("--count 5 --count 0", &s, NULL, err, sizeof err) == CLI_USAGE && s.count == 5);
}

static void test_help(void) {
    settings s = defaults();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cli_cmd cmd = CLI_CMD("test", "usage: test [options]\n", "about it\n", "after\n", table, NULL);
    cli_usage(&cmd, &s, f);
    fclose(f);
    CHECK(strstr(text, "usage: test [options]\n\nabout it\n\nThings:\n  --name NAME            a name (default x)\n"));
    CHECK(strstr(text, "  --kind red|green|blue  a colour (default red)\n"));
    CHECK(strstr(text, "  --count N              how many (default 3)\n"));
    CHECK(strstr(text, "  --big N                a large number\n"));              /* 0: not given */
    CHECK(strstr(text, "\nOther:\n  --rate R               a rate (default 0)\n")); /* CLI_SHOW0 */
    CHECK(strstr(text, "  --open X               above zero (default: whatever)\n"));
    CHECK(strstr(text, "  --flag                 a switch\n"));
    CHECK(!strstr(text, "old-count"));
    CHECK(strstr(text, "  --sizes LIST           a list of sizes, with a help text long enough that it\n"
                       "                         has to wrap over more than one line of the help\n"));
    CHECK(strstr(text, "  --help, -h             this text\n") && strstr(text, "\nafter\n"));
    for (const char *l = text; *l; l = strchr(l, '\n') + 1) CHECK(strchr(l, '\n') - l <= 80);
    free(text);
}

static void test_json(void) {
    cli_cmd cmd = CLI_CMD("test", "", NULL, NULL, table, NULL);
    cli_pool pool = {0};
    settings s = defaults();
    char err[300];
    const char *j = "{\"name\": \"zed\", \"kind\": \"green\", \"count\": 12, \"big\": 4503599627370497, "
                    "\"rate\": 0.5, \"flag\": true, \"sizes\": \"32,48\"}";
    CHECK(cli_apply_json(&cmd, &s, &pool, "cfg.json", j, strlen(j), err, sizeof err) == 0);
    CHECK(!strcmp(s.name, "zed") && !strcmp(s.kind, "green") && s.count == 12 && s.flag == 1 && s.rate == 0.5);
    CHECK(s.sizes.n == 2 && s.sizes.v[1] == 48);
    char *out = cli_to_json(&cmd, &s);
    settings t = defaults();
    CHECK(out && cli_apply_json(&cmd, &t, &pool, "run.json", out, strlen(out), err, sizeof err) == 0);
    CHECK(!strcmp(t.name, "zed") && t.count == 12 && t.big == 4503599627370497LL && t.flag == 1 && !t.sizes.n);
    char *again = cli_to_json(&cmd, &t);
    CHECK(again && !strcmp(out, again));
    free(out);
    free(again);
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"json\": true}", "cfg.json: key 'json' is not a setting (see handgrad test --help)"},
        {"{\"nope\": 1}", "cfg.json: key 'nope' is not a setting (see handgrad test --help)"},
        {"{\"name\": 5}", "cfg.json: key 'name': the value has the wrong type"},
        {"{\"count\": 1.5}", "cfg.json: key 'count': '1.5' is not an integer in [1, 100]"},
        {"{\"kind\": \"pink\"}", "cfg.json: key 'kind': 'pink' is not red, green or blue"},
        {"[1]", "cfg.json: not a JSON object"},
        {"{} x", "cfg.json: text after the JSON object at byte 3"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        settings u = defaults();
        err[0] = 0;
        int rc = cli_apply_json(&cmd, &u, &pool, "cfg.json", bad[i].json, strlen(bad[i].json), err, sizeof err);
        if (rc != 1 || strcmp(err, bad[i].want)) {
            fprintf(stderr, "%s: %d '%s', want '%s'\n", bad[i].json, rc, err, bad[i].want);
            check_failures++;
        }
    }
    cli_pool_free(&pool);
}

int main(void) {
    test_values();
    test_errors();
    test_help();
    test_json();
    CHECK_DONE();
}
