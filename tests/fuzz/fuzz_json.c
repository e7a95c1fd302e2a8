/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_json.c: the one strict JSON reader (formats/json.c, which reads the
 * safetensors header today and Keras's config.json next) on arbitrary
 * bytes, as one document and as a required object. Invariants: success or
 * an error, never both; an error's offset lies within the text (or at its
 * end) and has a message; every value of a success lies within the text,
 * every string is NUL-terminated (read whole here, so ASan sees an
 * overrun), and every key of an object is found by json_field.
 */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "formats/json.h"

static unsigned walk(const json_value *v, size_t len, int depth) {
  if (v->off > len) fuzz_fail("a value lies outside the text", "");
  if (depth > 10000) fuzz_fail("a tree deeper than the text", "");
  unsigned sum = 0;
  if (v->kind == JSON_STR) {
    if (!v->s) fuzz_fail("a string without its text", "");
    sum += (unsigned)strlen(v->s);
  }
  if (v->kind == JSON_ARR || v->kind == JSON_OBJ) {
    if (v->n < 0 || (v->n > 0 && !v->items)) fuzz_fail("a container without its items", "");
    for (int k = 0; k < v->n; k++) {
      if (v->kind == JSON_OBJ) {
        if (!v->keys || !v->keys[k]) fuzz_fail("an object member without its key", "");
        sum += (unsigned)strlen(v->keys[k]);
        const json_value *f = json_field(v, v->keys[k]);
        if (!f) fuzz_fail("a key json_field does not find", v->keys[k]);
      }
      sum += walk(&v->items[k], len, depth + 1);
    }
  }
  return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned sum = 0;
  for (int object = 0; object < 2; object++) {
    arena *a = arena_create();
    json_parse_options o = {.base = 0, .doc_name = "document", .require_object = object == 1};
    json_value v;
    json_error err = {0};
    if (json_parse((const char *)data, size, &o, a, &v, &err)) {
      if (err.msg) fuzz_fail("a success with an error message", err.msg);
      if (object && v.kind != JSON_OBJ) fuzz_fail("require_object let a non-object through", "");
      sum += walk(&v, size, 0);
    } else {
      if (!err.msg || !err.msg[0]) fuzz_fail("an error without a message", "");
      if (err.off > size) fuzz_fail("an error offset past the text", err.msg);
    }
    arena_destroy(a);
  }
  return (int)(sum & 0); /* sum keeps the reads */
}
