/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json.h: the project's one JSON reader, strict RFC 8259: no trailing
 * commas, no comments, duplicate keys rejected, strings UTF-8 with every
 * escape decoded (a NUL or an unpaired surrogate is an error), nesting at
 * most JSON_MAX_DEPTH deep. It builds a tree in an arena the caller owns.
 *
 * Used by the safetensors reader (its header) and, later, importers that
 * read a JSON model description. It reports nothing itself: a failure comes
 * back as a json_error (byte offset + message) for the caller to word into
 * a diagnostic, so each format keeps its own error prefix.
 */
#ifndef CASTOR_FORMATS_JSON_H
#define CASTOR_FORMATS_JSON_H

#include "util/util.h"

enum { JSON_MAX_DEPTH = 64 };

/* JSON_LIT: true, false or null (json_value.lit tells them apart). */
typedef enum json_kind { JSON_STR, JSON_INT, JSON_FLOAT, JSON_LIT, JSON_ARR, JSON_OBJ } json_kind;

typedef struct json_value {
  json_kind kind;
  size_t off;                /* byte offset of the value in the document (base included) */
  const char *s;             /* STR: decoded, NUL-terminated */
  int64_t i;                 /* INT: a number without fraction or exponent, in int64 range */
  double num;                /* INT, FLOAT: the number (strtod: nearest double, +-HUGE_VAL past range) */
  char lit;                  /* LIT: 't' (true), 'f' (false) or 'n' (null) */
  struct json_value *items;  /* ARR, OBJ: the elements / the values, in document order */
  const char **keys;         /* OBJ: keys[k] names items[k] */
  int n;                     /* ARR, OBJ: number of items */
} json_value;

typedef struct json_error {
  size_t off;      /* byte offset in the document (base included) */
  const char *msg; /* in the parse's arena, e.g. "duplicate key 'a'" */
} json_error;

typedef struct json_parse_options {
  size_t base;          /* offset of text[0] in the enclosing file (offsets include it) */
  const char *doc_name; /* names the document in messages ("header"): "the end of the header" */
  bool require_object;  /* the top-level value must be an object */
} json_parse_options;

/* Parses text[0..len) as one JSON value, with optional surrounding
 * whitespace, into *out (allocated in `a`). On failure returns false and
 * fills *err; `a` then holds garbage the caller frees with the arena. */
bool json_parse(const char *text, size_t len, const json_parse_options *o, arena *a,
                json_value *out, json_error *err);

/* The value of `key` in an object, or NULL. */
const json_value *json_field(const json_value *obj, const char *key);
/* "a string", "an integer", "a number", "a literal", "an array", "an object" */
const char *json_kind_name(json_kind k);

#endif
