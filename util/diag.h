/* SPDX-License-Identifier: Apache-2.0 */
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
 *
 * An error may also carry a kind: what sort of failure it is (an unreadable
 * file, a malformed model, a device failure...). The kind is never rendered;
 * it lets a caller such as the public API choose a status without looking at
 * the message text.
 */
#ifndef CASTOR_DIAG_H
#define CASTOR_DIAG_H

#include "util/util.h"

typedef struct diag_loc {
  const char *file; /* NULL: no location */
  int line, col;    /* 1-based; 0 = unknown */
} diag_loc;

typedef enum diag_severity { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE } diag_severity;

/* What sort of failure an error is. One kind per castor_status that a stage
 * can cause (api/castor.c maps them); the reporter, which knows, names it. */
typedef enum diag_kind {
  DIAG_KIND_NONE,             /* no error reported (diag_first_error_kind only) */
  DIAG_KIND_UNSPECIFIED,      /* an error reported without a kind: the caller decides */
  DIAG_KIND_IO,               /* a file could not be opened, read, written or created */
  DIAG_KIND_INVALID_ARGUMENT, /* a bad option or argument from the caller */
  DIAG_KIND_INVALID_MODEL,    /* malformed model text, weights file, tensor or .npy; shape mismatch */
  DIAG_KIND_UNSUPPORTED,      /* valid input this build does not support */
  DIAG_KIND_CODEGEN,          /* LLVM failed */
  DIAG_KIND_DEVICE,           /* the device (CUDA driver, GPU) failed or is missing */
  DIAG_KIND_INTERNAL          /* a bug in castor */
} diag_kind;

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
 * compound literal such as (diag_loc){file, 1, 1} may be passed directly.
 * Its kind is DIAG_KIND_UNSPECIFIED: the caller's context decides what a
 * plain error means (for the frontend a malformed model, after the pass
 * pipeline a bug). Errors whose kind matters use diag_error_kind. */
#define diag_error(d, ...) diag_report((d), DIAG_ERROR, __VA_ARGS__)
#define diag_warning(d, ...) diag_report((d), DIAG_WARNING, __VA_ARGS__)
#define diag_note(d, ...) diag_report((d), DIAG_NOTE, __VA_ARGS__)

/* An error of the given kind, rendered exactly as diag_error renders it.
 * kind is not DIAG_KIND_NONE. */
void diag_error_kind(diag_sink *d, diag_kind kind, diag_loc loc, const char *fmt, ...)
    CASTOR_PRINTF(4, 5);
void diag_verror_kind(diag_sink *d, diag_kind kind, diag_loc loc, const char *fmt, va_list ap);

int diag_error_count(const diag_sink *d);
int diag_warning_count(const diag_sink *d);

/* All rendered diagnostics so far, in order ("" if none). */
const char *diag_text(diag_sink *d);
/* Just the first error's rendered text ("" if none). */
const char *diag_first_error(diag_sink *d);
/* The first error's kind; DIAG_KIND_NONE if there is no error. */
diag_kind diag_first_error_kind(const diag_sink *d);
/* Forgets every diagnostic, counts and the first error's kind; keeps the
 * registered sources and interned names. */
void diag_clear(diag_sink *d);

/* Interns a file name for the sink's lifetime, so locations can point at it. */
const char *diag_intern(diag_sink *d, const char *file);

#endif
