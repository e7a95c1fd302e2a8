/* SPDX-License-Identifier: Apache-2.0 */
/*
 * diag.c: the diagnostics sink. Renders each report at once into one text
 * buffer (clang style, with the source line and a caret when the file's text
 * was registered), counts errors and warnings, and keeps the first error's
 * text and kind.
 */
#include "util/diag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct diag_source {
  char *file, *text;
  size_t len;
} diag_source;

struct diag_sink {
  VEC(diag_source) sources;
  VEC(char *) names;
  str_buf text;
  str_buf first_error;
  diag_kind first_kind; /* DIAG_KIND_NONE until the first error */
  int n_errors, n_warnings;
};

diag_sink *diag_sink_create(void) {
  diag_sink *d = xcalloc(1, sizeof *d);
  str_buf_init(&d->text);
  str_buf_init(&d->first_error);
  return d;
}

void diag_sink_destroy(diag_sink *d) {
  if (!d) return;
  for (size_t i = 0; i < d->sources.len; i++) {
    free(d->sources.data[i].file);
    free(d->sources.data[i].text);
  }
  vec_free(&d->sources);
  for (size_t i = 0; i < d->names.len; i++) free(d->names.data[i]);
  vec_free(&d->names);
  str_buf_fini(&d->text);
  str_buf_fini(&d->first_error);
  free(d);
}

void diag_sink_add_source(diag_sink *d, const char *file, const char *text, size_t len) {
  diag_source s = {xstrdup(file), xmalloc(len + 1), len};
  memcpy(s.text, text, len);
  s.text[len] = 0;
  vec_push(&d->sources, s);
}

const char *diag_intern(diag_sink *d, const char *file) {
  for (size_t i = 0; i < d->names.len; i++)
    if (strcmp(d->names.data[i], file) == 0) return d->names.data[i];
  char *s = xstrdup(file);
  vec_push(&d->names, s);
  return s;
}

static const diag_source *find_source(const diag_sink *d, const char *file) {
  for (size_t i = d->sources.len; i-- > 0;)
    if (strcmp(d->sources.data[i].file, file) == 0) return &d->sources.data[i];
  return NULL;
}

/* Appends the source line `line` and a caret under byte column `col`. Bytes
 * that are not printable ASCII or part of valid-looking UTF-8 print as '?',
 * so a diagnostic about bad bytes is itself clean text. */
static void render_caret(str_buf *b, const diag_source *s, int line, int col) {
  const char *p = s->text, *end = s->text + s->len;
  for (int l = 1; l < line && p < end; p++)
    if (*p == '\n') l++;
  if (p > end || (p == end && line > 1 && col > 1 && (p == s->text || p[-1] != '\n'))) return;
  const char *eol = p;
  while (eol < end && *eol != '\n' && *eol != '\r') eol++;
  for (const char *q = p; q < eol; q++) {
    unsigned char c = (unsigned char)*q;
    str_buf_putc(b, (c == '\t' || (c >= 0x20 && c < 0x7f) || c >= 0x80) && c != 0x7f ? (char)c : '?');
  }
  str_buf_putc(b, '\n');
  for (int i = 1; i < col && p + i - 1 < eol; i++) {
    unsigned char c = (unsigned char)p[i - 1];
    if ((c & 0xc0) == 0x80) continue; /* UTF-8 continuation: same column */
    str_buf_putc(b, c == '\t' ? '\t' : ' ');
  }
  str_buf_puts(b, "^\n");
}

/* Renders and records one diagnostic; kind matters only for errors. */
static void report(diag_sink *d, diag_severity sev, diag_kind kind, diag_loc loc, const char *fmt,
                   va_list ap) {
  static const char *const names[] = {"error", "warning", "note"};
  str_buf b;
  str_buf_init(&b);
  if (loc.file) {
    str_buf_puts(&b, loc.file);
    if (loc.line > 0) {
      str_buf_printf(&b, ":%d", loc.line);
      if (loc.col > 0) str_buf_printf(&b, ":%d", loc.col);
    }
    str_buf_puts(&b, ": ");
  }
  str_buf_printf(&b, "%s: ", names[sev]);
  str_buf_vprintf(&b, fmt, ap);
  str_buf_putc(&b, '\n');
  if (loc.file && loc.line > 0 && loc.col > 0) {
    const diag_source *s = find_source(d, loc.file);
    if (s) render_caret(&b, s, loc.line, loc.col);
  }
  if (sev == DIAG_ERROR) {
    if (d->n_errors == 0) {
      str_buf_puts(&d->first_error, str_buf_cstr(&b));
      d->first_kind = kind;
    }
    d->n_errors++;
  } else if (sev == DIAG_WARNING) {
    d->n_warnings++;
  }
  str_buf_puts(&d->text, str_buf_cstr(&b));
  str_buf_fini(&b);
}

void diag_vreport(diag_sink *d, diag_severity sev, diag_loc loc, const char *fmt, va_list ap) {
  report(d, sev, DIAG_KIND_UNSPECIFIED, loc, fmt, ap);
}

void diag_report(diag_sink *d, diag_severity sev, diag_loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(d, sev, DIAG_KIND_UNSPECIFIED, loc, fmt, ap);
  va_end(ap);
}

void diag_verror_kind(diag_sink *d, diag_kind kind, diag_loc loc, const char *fmt, va_list ap) {
  CASTOR_ASSERT(kind > DIAG_KIND_NONE && kind <= DIAG_KIND_INTERNAL);
  report(d, DIAG_ERROR, kind, loc, fmt, ap);
}

void diag_error_kind(diag_sink *d, diag_kind kind, diag_loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror_kind(d, kind, loc, fmt, ap);
  va_end(ap);
}

int diag_error_count(const diag_sink *d) { return d->n_errors; }
int diag_warning_count(const diag_sink *d) { return d->n_warnings; }
const char *diag_text(diag_sink *d) { return str_buf_cstr(&d->text); }
const char *diag_first_error(diag_sink *d) { return str_buf_cstr(&d->first_error); }
diag_kind diag_first_error_kind(const diag_sink *d) { return d->first_kind; }

void diag_clear(diag_sink *d) {
  str_buf_clear(&d->text);
  str_buf_clear(&d->first_error);
  d->n_errors = d->n_warnings = 0;
  d->first_kind = DIAG_KIND_NONE;
}
