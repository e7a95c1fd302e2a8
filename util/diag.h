/*
 * diag.h: the one diagnostics sink every stage reports user errors through.
 *
 * A diagnostic has a severity, a location (file, 1-based line and column)
 * and a message; if the sink knows the source text of that file it renders
 * the source line and a caret under the column, clang-style:
 *
 *   model.cast:3:12: error: unknown layer 'dence'
 *   x = dence(digits, units=10)
 *       ^
 *
 * Library code never prints; the sink collects rendered text and the caller
 * (CLI, public API) decides where it goes.
 */
#ifndef CASTOR_DIAG_H
#define CASTOR_DIAG_H

#include "util.h"

typedef struct diag_loc {
  const char *file; /* NULL: no location */
  int line, col;    /* 1-based; 0 = unknown */
} diag_loc;

typedef enum diag_severity { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE } diag_severity;

typedef struct diag_sink diag_sink;

diag_sink *diag_sink_create(void);
void diag_sink_destroy(diag_sink *d);

/* Registers the text of a file so diagnostics in it show the line and a
 * caret. The sink copies the text. */
void diag_sink_add_source(diag_sink *d, const char *file, const char *text, size_t len);

void diag_report(diag_sink *d, diag_severity sev, diag_loc loc, const char *fmt, ...)
    CASTOR_PRINTF(4, 5);
void diag_vreport(diag_sink *d, diag_severity sev, diag_loc loc, const char *fmt, va_list ap);
/* diag_error(d, loc, fmt, ...); the location is part of __VA_ARGS__ so that a
 * compound literal such as (diag_loc){file, 1, 1} may be passed directly. */
#define diag_error(d, ...) diag_report((d), DIAG_ERROR, __VA_ARGS__)
#define diag_warning(d, ...) diag_report((d), DIAG_WARNING, __VA_ARGS__)
#define diag_note(d, ...) diag_report((d), DIAG_NOTE, __VA_ARGS__)

int diag_error_count(const diag_sink *d);
int diag_warning_count(const diag_sink *d);

/* All rendered diagnostics so far, in order ("" if none). */
const char *diag_text(diag_sink *d);
/* Just the first error's rendered text ("" if none). */
const char *diag_first_error(diag_sink *d);
void diag_clear(diag_sink *d);

/* Interns a file name for the sink's lifetime, so locations can point at it. */
const char *diag_intern(diag_sink *d, const char *file);

#endif
