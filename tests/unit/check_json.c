/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_json.c: Check suite of formats/json: the tree of valid documents
 * (kinds, offsets with a base, decoded strings, objects in document order),
 * and for each malformed one its exact message and byte offset, as the
 * safetensors reader words them (tests/unit/check_frontend.c checks that
 * wording end to end).
 */
#include "formats/json.h"

#include "tests/unit/test_support.h"

#include <string.h>

static bool parse(const char *text, size_t base, bool object, arena *a, json_value *v,
                  json_error *e) {
  json_parse_options o = {.base = base, .doc_name = "header", .require_object = object};
  return json_parse(text, strlen(text), &o, a, v, e);
}

START_TEST(test_tree) {
  arena *a = arena_create();
  json_value v;
  json_error e;
  const char *text = " {\"b\": [1, -2.5e3, \"x\\u00e9\\ud83d\\ude00\"], \"a\": {\"t\": true}, \"n\": null}";
  ck_assert_msg(parse(text, 8, true, a, &v, &e), "%s", e.msg);
  ck_assert_int_eq(v.kind, JSON_OBJ);
  ck_assert_int_eq(v.n, 3);
  ck_assert_uint_eq(v.off, 9); /* after one space, plus the base */
  ck_assert_str_eq(v.keys[0], "b");
  ck_assert_str_eq(v.keys[1], "a");
  const json_value *b = json_field(&v, "b");
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(b->kind, JSON_ARR);
  ck_assert_int_eq(b->n, 3);
  ck_assert_int_eq(b->items[0].kind, JSON_INT);
  ck_assert_int_eq(b->items[0].i, 1);
  ck_assert_int_eq(b->items[1].kind, JSON_FLOAT);
  ck_assert_int_eq(b->items[2].kind, JSON_STR);
  ck_assert_str_eq(b->items[2].s, "x\xc3\xa9\xf0\x9f\x98\x80");
  ck_assert_int_eq(json_field(&v, "a")->items[0].kind, JSON_LIT);
  ck_assert_ptr_null(json_field(&v, "zz"));
  ck_assert_str_eq(json_kind_name(JSON_ARR), "an array");
  /* any value at the top when no object is required */
  ck_assert_msg(parse("  -9223372036854775807 ", 0, false, a, &v, &e), "%s", e.msg);
  ck_assert_int_eq(v.i, -INT64_MAX);
  ck_assert_msg(parse("[]", 0, false, a, &v, &e), "%s", e.msg);
  ck_assert_int_eq(v.kind, JSON_ARR);
  ck_assert_int_eq(v.n, 0);
  arena_destroy(a);
}
END_TEST

START_TEST(test_errors) {
  static const struct {
    const char *text;
    bool object;
    size_t off;
    const char *msg;
  } cases[] = {
      {"[1]", true, 0, "expected '{', got '['"},
      {"{\"a\" 1}", true, 5, "expected ':', got '1'"},
      {"{\"a\":1,}", true, 7, "expected '\"', got '}'"},
      {"{\"a\":1", true, 6, "expected ',' or '}', got the end of the header"},
      {"{} x", true, 3, "unexpected data after the header object"},
      {"1 2", false, 2, "unexpected data after the header value"},
      {"{\"a\":1,\"a\":2}", true, 7, "duplicate key 'a'"},
      {"{\"a\":01}", true, 5, "invalid number: leading zero"},
      {"{\"a\":99999999999999999999}", true, 5, "integer out of range"},
      {"{\"a\":\"\\q\"}", true, 6, "invalid escape sequence in a string"},
      {"{\"a\":\"\\ud800\"}", true, 6, "unpaired surrogate in a string"},
      {"{\"a\":\"\\u0000\"}", true, 6, "NUL character in a string"},
      {"{\"a\":\"\xff\"}", true, 6, "invalid UTF-8 byte 0xff in a string"},
      {"{\"a\":\"\n\"}", true, 6, "control character 0x0a in a string"},
      {"{\"a\":\"x", true, 5, "unterminated string"},
      {"{\"a\":tru}", true, 5, "expected a value, got 't'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    arena *a = arena_create();
    json_value v;
    json_error e;
    ck_assert_msg(!parse(cases[i].text, 100, cases[i].object, a, &v, &e), "case %zu parsed", i);
    ck_assert_msg(e.off == 100 + cases[i].off, "case %zu: offset %zu", i, e.off);
    ck_assert_msg(!strcmp(e.msg, cases[i].msg), "case %zu: '%s'", i, e.msg);
    arena_destroy(a);
  }
  /* nesting deeper than JSON_MAX_DEPTH */
  char deep[2 * JSON_MAX_DEPTH + 8];
  memset(deep, '[', JSON_MAX_DEPTH + 1);
  memset(deep + JSON_MAX_DEPTH + 1, ']', JSON_MAX_DEPTH + 1);
  deep[2 * JSON_MAX_DEPTH + 2] = 0;
  arena *a = arena_create();
  json_value v;
  json_error e;
  ck_assert(!parse(deep, 0, false, a, &v, &e));
  ck_assert_str_eq(e.msg, "nested more than 64 deep");
  arena_destroy(a);
}
END_TEST

static Suite *json_suite(void) {
  Suite *s = suite_create("json");
  TCase *tc = tcase_create("json");
  tcase_add_test(tc, test_tree);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(json_suite()); }
