/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_history.c: Check suite of train/history.c and history_svg.c: the
 * CSV files byte for byte (columns present or left out, NaN and Inf, the
 * loss-scale trace beside them), and the SVG: well-formed XML (xmllint when
 * it is installed, and always a structural check here), one point per
 * epoch in each series, lines broken at NaN, the log2 axis of the loss
 * scale and its skipped-step markers, the title escaped.
 */
#include "train/history.h"

#include "tests/unit/test_support.h"
#include "tests/unit/tmpdir_fixture.h"

#include <math.h>

/* Not inlined: GCC 12 at -O3 otherwise takes a pointer into the text for
 * one to the local `data` (whose address str_read_file receives) and
 * warns -Wdangling-pointer at count's strstr loop: a false positive. */
__attribute__((noinline)) static char *read_text(const char *path) {
  char *data;
  size_t len;
  ck_assert_msg(str_read_file(path, &data, &len), "%s: %s", path, strerror(errno));
  return data;
}

/* A run of `epochs` epochs of `steps` steps each, with a loss scale that
 * starts at 2^15, halves on two skipped steps and doubles once. */
static void make_history(rt_history *h, int epochs, int steps, bool acc, bool val, bool scale) {
  rt_history_init(h, acc, val, scale);
  double s = 32768;
  int64_t skipped = 0, step = 0;
  for (int e = 1; e <= epochs; e++) {
    for (int k = 0; k < steps; k++) {
      step++;
      if (scale) rt_history_add_scale(h, step, e, s, skipped);
      if (step == 3 || step == 4) s /= 2, skipped++; /* steps 3 and 4 overflowed */
      if (step == 9) s *= 2;
    }
    rt_epoch_record r = {e, 2.0 / e, 0.5 + 0.1 * e, 2.2 / e, 0.45 + 0.1 * e, 1.5 * e,
                         1.25e-5, s, skipped};
    rt_history_add_epoch(h, &r);
  }
}

START_TEST(test_csv) {
  rt_history h;
  make_history(&h, 3, 4, true, true, true);
  h.epochs[1].val_loss = NAN;
  h.epochs[2].loss = INFINITY;
  str_buf b;
  str_buf_init(&b);
  rt_history_csv(&h, &b);
  ck_assert_str_eq(str_buf_cstr(&b),
                   "epoch,loss,accuracy,val_loss,val_accuracy,seconds,seconds_per_sample,"
                   "loss_scale,steps_skipped\n"
                   "1,2,0.6,2.2,0.55,1.500000,1.25e-05,8192,2\n"
                   "2,1,0.7,nan,0.65,3.000000,1.25e-05,8192,2\n"
                   "3,inf,0.8,0.733333333,0.75,4.500000,1.25e-05,16384,2\n");
  str_buf_clear(&b);
  rt_history_scale_csv(&h, &b);
  const char *trace = "step,epoch,loss_scale,steps_skipped\n"
                      "1,1,32768,0\n2,1,32768,0\n3,1,32768,0\n4,1,16384,1\n"
                      "5,2,8192,2\n6,2,8192,2\n7,2,8192,2\n8,2,8192,2\n"
                      "9,3,8192,2\n10,3,16384,2\n11,3,16384,2\n12,3,16384,2\n";
  ck_assert_str_eq(str_buf_cstr(&b), trace);
  /* written to files: the trace beside the epochs */
  char p[256], ps[256];
  diag_sink *d = diag_sink_create();
  ck_assert_msg(rt_history_write_csv(&h, tmp_path("run.csv", p, sizeof p), NULL, d), "%s",
                diag_text(d));
  str_buf_clear(&b);
  rt_history_csv(&h, &b);
  char *got = read_text(p);
  ck_assert_str_eq(got, str_buf_cstr(&b));
  free(got);
  got = read_text(tmp_path("run.loss_scale.csv", ps, sizeof ps));
  ck_assert_str_eq(got, trace);
  free(got);
  ck_assert_int_eq(tmpdir_count(), 2);
  rt_history_fini(&h);
  /* without accuracy, validation or loss scaling: those columns are left
   * out, and no trace file is written */
  make_history(&h, 2, 2, false, false, false);
  str_buf_clear(&b);
  rt_history_csv(&h, &b);
  ck_assert_str_eq(str_buf_cstr(&b), "epoch,loss,seconds,seconds_per_sample\n"
                                     "1,2,1.500000,1.25e-05\n2,1,3.000000,1.25e-05\n");
  ck_assert(rt_history_write_csv(&h, tmp_path("plain.csv", p, sizeof p), NULL, d));
  ck_assert_int_eq(tmpdir_count(), 3);
  rt_history_fini(&h);
  make_history(&h, 1, 1, false, true, false);
  str_buf_clear(&b);
  rt_history_csv(&h, &b);
  ck_assert_str_eq(str_buf_cstr(&b), "epoch,loss,val_loss,seconds,seconds_per_sample\n"
                                     "1,2,2.2,1.500000,1.25e-05\n");
  /* an unwritable path */
  tmp_path("no/such/dir.csv", p, sizeof p);
  ck_assert(!rt_history_write_csv(&h, p, NULL, d));
  ck_assert_int_eq(diag_first_error_kind(d), DIAG_KIND_IO);
  rt_history_fini(&h);
  str_buf_fini(&b);
  diag_sink_destroy(d);
}
END_TEST

START_TEST(test_scale_path) {
  static const char *const cases[][2] = {{"run.csv", "run.loss_scale.csv"},
                                         {"out/h", "out/h.loss_scale.csv"},
                                         {"a.CSV", "a.CSV.loss_scale.csv"},
                                         {".csv", ".loss_scale.csv"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *p = rt_history_scale_csv_path(cases[i][0]);
    ck_assert_str_eq(p, cases[i][1]);
    free(p);
  }
}
END_TEST

/* ---- SVG ---- */

/* A structural XML check: one root element, every tag closed in order,
 * attribute values quoted, '&' only in entities, '<' never in text or
 * attributes. Returns NULL or what is wrong. */
static const char *xml_problem(const char *s) {
  static char msg[160];
  const char *stack[64];
  int depth = 0, roots = 0;
  const char *p = s;
#define FAIL(...) return snprintf(msg, sizeof msg, __VA_ARGS__), msg
  while (*p) {
    if (*p == '&') {
      static const char *const ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
      bool ok = false;
      for (int i = 0; i < 5; i++) ok |= strncmp(p, ents[i], strlen(ents[i])) == 0;
      if (!ok) FAIL("bad entity at byte %td", p - s);
      p++;
      continue;
    }
    if (*p != '<') {
      p++;
      continue;
    }
    if (strncmp(p, "<?", 2) == 0) {
      if (p != s) FAIL("processing instruction not at the start");
      p = strstr(p, "?>");
      if (!p) FAIL("unterminated <?");
      p += 2;
      continue;
    }
    bool closing = p[1] == '/';
    const char *name = p + 1 + closing;
    size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_:0123456789");
    if (n == 0) FAIL("bad tag at byte %td", p - s);
    p = name + n;
    if (closing) {
      if (depth == 0 || strncmp(stack[depth - 1], name, n) != 0 ||
          strspn(stack[depth - 1], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_:0123456789") != n)
        FAIL("mismatched </%.*s> at byte %td", (int)n, name, p - s);
      depth--;
      if (*p != '>') FAIL("bad closing tag at byte %td", p - s);
      p++;
      continue;
    }
    for (;;) { /* attributes */
      p += strspn(p, " \n\t");
      if (*p == '>' || strncmp(p, "/>", 2) == 0) break;
      size_t an = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_:0123456789");
      if (an == 0 || p[an] != '=' || p[an + 1] != '"') FAIL("bad attribute at byte %td", p - s);
      p += an + 2;
      while (*p && *p != '"') {
        if (*p == '<') FAIL("'<' in an attribute at byte %td", p - s);
        p++;
      }
      if (!*p) FAIL("unterminated attribute");
      p++;
    }
    if (depth == 0) roots++;
    if (*p == '/') {
      p += 2;
      continue;
    }
    p++;
    if (depth == 64) FAIL("too deep");
    stack[depth++] = name;
  }
  if (depth != 0) FAIL("%d unclosed elements", depth);
  if (roots != 1) FAIL("%d root elements", roots);
#undef FAIL
  return NULL;
}

/* Number of "x,y" pairs in the points of the n-th polyline of a series. */
static int series_points(const char *svg, const char *series, int nth, double *first_x,
                         double *last_x) {
  char key[64];
  snprintf(key, sizeof key, "data-series=\"%s\"", series);
  const char *p = svg;
  for (int i = 0; i <= nth; i++) {
    p = strstr(p, key);
    if (!p) return -1;
    p += strlen(key);
  }
  p = strstr(p, "points=\"");
  ck_assert(p != NULL);
  p += 8;
  int n = 0;
  while (*p != '"') {
    double x, y;
    int used;
    ck_assert(sscanf(p, "%lf,%lf%n", &x, &y, &used) == 2);
    if (n == 0) *first_x = x;
    ck_assert_msg(n == 0 || x >= *last_x, "x goes backwards in %s", series);
    *last_x = x;
    p += used;
    p += strspn(p, " ");
    n++;
  }
  return n;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

static void check_with_xmllint(const char *path) {
  if (system("xmllint --version > /dev/null 2>&1") != 0) return; /* libxml2-utils absent */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "xmllint --noout '%s'", path);
  ck_assert_msg(system(cmd) == 0, "xmllint rejects %s", path);
}

START_TEST(test_svg) {
  rt_history h;
  make_history(&h, 5, 4, true, true, true);
  h.epochs[2].val_loss = NAN; /* breaks the val_loss line in two */
  char p[256];
  tmp_path("plot.svg", p, sizeof p);
  diag_sink *d = diag_sink_create();
  const char *title = "mnist <mlp> & \"friends\" \x01\xff";
  ck_assert_msg(rt_history_write_svg(&h, p, title, d), "%s", diag_text(d));
  char *svg = read_text(p);
  const char *problem = xml_problem(svg);
  ck_assert_msg(problem == NULL, "%s", problem);
  check_with_xmllint(p);
  ck_assert(strstr(svg, "<title>mnist &lt;mlp&gt; &amp; &quot;friends&quot; ?\?</title>"));
  double x0, x1;
  ck_assert_int_eq(series_points(svg, "loss", 0, &x0, &x1), 5);
  ck_assert_msg(x0 > 78 && x1 < 760 - 24, "points inside the frame: %f..%f", x0, x1);
  ck_assert_int_eq(series_points(svg, "accuracy", 0, &x0, &x1), 5);
  ck_assert_int_eq(series_points(svg, "val_accuracy", 0, &x0, &x1), 5);
  ck_assert_int_eq(series_points(svg, "val_loss", 0, &x0, &x1), 2);
  ck_assert_int_eq(series_points(svg, "val_loss", 1, &x0, &x1), 2);
  ck_assert_int_eq(series_points(svg, "val_loss", 2, &x0, &x1), -1);
  /* the loss scale: 2^15 -> 2^14 -> 2^13 -> 2^14, a step function through
   * its changes; two skipped steps marked */
  ck_assert_int_eq(series_points(svg, "loss_scale", 0, &x0, &x1), 1 + 2 * 4);
  ck_assert_int_eq(count(svg, "data-series=\"skipped\""), 2);
  ck_assert(strstr(svg, ">2<tspan dy=\"-6\" font-size=\"9\">15</tspan></text>"));
  ck_assert(strstr(svg, ">2<tspan dy=\"-6\" font-size=\"9\">13</tspan></text>"));
  free(svg);
  rt_history_fini(&h);
  diag_sink_destroy(d);
}
END_TEST

/* Degenerate histories still make valid documents: one epoch, no
 * accuracy, all-NaN losses, no scale points, a long run without markers. */
START_TEST(test_svg_edge_cases) {
  char p[256];
  tmp_path("edge.svg", p, sizeof p);
  diag_sink *d = diag_sink_create();
  for (int c = 0; c < 4; c++) {
    rt_history h;
    if (c == 0) make_history(&h, 1, 1, false, false, false);
    if (c == 1) {
      make_history(&h, 3, 2, true, true, true);
      for (int i = 0; i < 3; i++) h.epochs[i].loss = h.epochs[i].val_loss = NAN;
    }
    if (c == 2) rt_history_init(&h, true, true, true);
    if (c == 3) make_history(&h, 200, 1, true, false, true);
    str_buf b;
    str_buf_init(&b);
    rt_history_svg(&h, NULL, &b);
    const char *problem = xml_problem(str_buf_cstr(&b));
    ck_assert_msg(problem == NULL, "case %d: %s", c, problem);
    ck_assert_msg(strstr(str_buf_cstr(&b), "nan") == NULL, "case %d: nan in coordinates", c);
    ck_assert(rt_history_write_svg(&h, p, NULL, d));
    check_with_xmllint(p);
    if (c == 1) ck_assert(strstr(str_buf_cstr(&b), "no finite values"));
    /* no per-epoch markers: only the two skipped steps and their legend entry */
    if (c == 3) ck_assert_int_eq(count(str_buf_cstr(&b), "<circle"), 3);
    str_buf_fini(&b);
    rt_history_fini(&h);
  }
  diag_sink_destroy(d);
}
END_TEST

static Suite *history_suite(void) {
  Suite *s = suite_create("history");
  TCase *tc = tcase_create("history");
  tcase_add_checked_fixture(tc, tmpdir_setup, tmpdir_teardown);
  tcase_add_test(tc, test_csv);
  tcase_add_test(tc, test_scale_path);
  tcase_add_test(tc, test_svg);
  tcase_add_test(tc, test_svg_edge_cases);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(history_suite()); }
