/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir_parse.c: reads the text form that ir_print writes (grammar in
 * ir/README.md) back into a graph, for castor-opt and golden tests.
 *
 * The text is line oriented: a `graph` header, one node per line in
 * schedule order, then `output` lines. Beyond the canonical form the parser
 * accepts blank lines, `#` comment lines, extra blanks between tokens and
 * \r\n line ends, and drops them; printing the result gives the canonical
 * text. It re-infers the type of every non-leaf node with ir_infer_type and
 * rejects a declared type that differs, so a parsed graph is well typed.
 * Graph-wide invariants that the text can state but a pass may break too
 * (input indices, batched inputs, unbatched constants) are left to
 * ir_verify, so that verifier failures can be written as golden tests.
 *
 * Errors go to the sink at file:line:col with the source line and a caret.
 * The parser stops at the first error and returns NULL; it never crashes or
 * loops on any input: every step consumes bytes of one line, value lookups
 * go through the hash map (util.h), and sizes are overflow-checked.
 */
#include "ir/ir.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the parser: one line at a time ---- */

typedef struct parser {
  diag_sink *d;
  const char *file; /* interned in the sink: for diagnostics */
  const char *node_file; /* in the graph's arena: node locations outlive the sink */
  ir_graph *g;
  hmap values, outputs; /* name -> node (strings in the graph's arena) */
  diag_loc header; /* where the `graph` line is */
  /* the current line, without its line end and trailing blanks */
  const char *line, *end, *p;
  int line_no;
} parser;

static diag_loc loc_at(const parser *ps, const char *at) {
  return (diag_loc){ps->file, ps->line_no, (int)(at - ps->line) + 1};
}

static diag_loc node_loc_at(const parser *ps, const char *at) {
  return (diag_loc){ps->node_file, ps->line_no, (int)(at - ps->line) + 1};
}

static bool fail_at(parser *ps, const char *at, const char *fmt, ...) CASTOR_PRINTF(3, 4);
static bool fail_at(parser *ps, const char *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(ps->d, DIAG_ERROR, loc_at(ps, at), fmt, ap);
  va_end(ap);
  return false;
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

static void skip_blanks(parser *ps) {
  while (ps->p < ps->end && is_blank(*ps->p)) ps->p++;
}

static bool at_eol(parser *ps) {
  skip_blanks(ps);
  return ps->p == ps->end;
}

/* Names the token at the cursor for "expected X, got Y" messages. */
static const char *describe(parser *ps, char *buf, size_t n) {
  if (ps->p == ps->end) return "end of line";
  const char *q = ps->p;
  if (is_ident_char(*q)) {
    while (q < ps->end && (is_ident_char(*q) || *q == '.') && q - ps->p < 40) q++;
  } else {
    q++;
    while (q < ps->end && ((unsigned char)*q & 0xc0) == 0x80) q++; /* whole UTF-8 char */
  }
  snprintf(buf, n, "'%.*s'", (int)(q - ps->p), ps->p);
  return buf;
}

static bool expected(parser *ps, const char *what) {
  char buf[64];
  return fail_at(ps, ps->p, "expected %s, got %s", what, describe(ps, buf, sizeof buf));
}

static bool expect_char(parser *ps, char c, const char *what) {
  skip_blanks(ps);
  if (ps->p < ps->end && *ps->p == c) return ps->p++, true;
  return expected(ps, what);
}

static bool accept_char(parser *ps, char c) {
  skip_blanks(ps);
  if (ps->p < ps->end && *ps->p == c) return ps->p++, true;
  return false;
}

/* A word: [A-Za-z_][A-Za-z0-9_]* with '.' after the first character when
 * dots is true (value names, keys and keywords share this rule). */
static bool lex_word(parser *ps, bool dots, const char **out, size_t *out_len) {
  skip_blanks(ps);
  const char *s = ps->p;
  if (s == ps->end || !is_ident_start(*s)) return false;
  while (ps->p < ps->end && (is_ident_char(*ps->p) || (dots && *ps->p == '.'))) ps->p++;
  *out = s, *out_len = (size_t)(ps->p - s);
  return true;
}

static bool word_is(const char *s, size_t n, const char *w) {
  return strlen(w) == n && memcmp(s, w, n) == 0;
}

/* A non-negative decimal integer no larger than max. */
static bool lex_uint(parser *ps, int64_t max, const char *what, int64_t *out) {
  skip_blanks(ps);
  const char *s = ps->p;
  if (s == ps->end || !is_digit(*s)) return expected(ps, what);
  int64_t v = 0;
  bool big = false;
  for (; ps->p < ps->end && is_digit(*ps->p); ps->p++) {
    int digit = *ps->p - '0';
    if (v > (max - digit) / 10) big = true;
    else v = v * 10 + digit;
  }
  if (ps->p < ps->end && (is_ident_start(*ps->p) || *ps->p == '.'))
    return fail_at(ps, s, "expected %s, got '%.*s'", what, (int)(ps->p - s + 1), s);
  if (big) return fail_at(ps, s, "%s %.*s is too large", what, (int)(ps->p - s), s);
  *out = v;
  return true;
}

/* ---- close-name suggestions for unknown ops ---- */


static bool unknown_op(parser *ps, const char *s, size_t n) {
  str_buf close;
  str_buf_init(&close);
  int n_close = 0;
  const char *names[IR_OP_COUNT];
  for (int i = 0; i < IR_OP_COUNT; i++) {
    const char *name = ir_op_name((ir_op)i);
    int limit = n <= 3 ? 1 : 2;
    if (str_edit_distance(s, n, name, strlen(name)) <= limit) names[n_close++] = name;
  }
  for (int i = 0; i < n_close; i++)
    str_buf_printf(&close, "%s'%s'", i == 0 ? "" : i + 1 == n_close ? " or " : ", ", names[i]);
  if (n_close == 0) {
    for (int i = 0; i < IR_OP_COUNT; i++)
      str_buf_printf(&close, "%s%s", i ? ", " : "", ir_op_name((ir_op)i));
    fail_at(ps, s, "unknown op '%.*s' (ops: %s)", (int)n, s, str_buf_cstr(&close));
  } else {
    fail_at(ps, s, "unknown op '%.*s'; did you mean %s?", (int)n, s, str_buf_cstr(&close));
  }
  str_buf_fini(&close);
  return false;
}

/* ---- pieces of a line ---- */

static bool parse_dtype(parser *ps, ir_dtype *out) {
  const char *s;
  size_t n;
  if (!lex_word(ps, false, &s, &n)) return expected(ps, "a dtype");
  if (dtype_from_name(s, n, out)) return true;
  return fail_at(ps, s, "unknown dtype '%.*s' (dtypes: f32, f16, bf16, i32, i64, i1)", (int)n, s);
}

static bool parse_state_kind(parser *ps, ir_state_kind *out) {
  const char *s;
  size_t n;
  if (!lex_word(ps, false, &s, &n)) return expected(ps, "a state kind");
  if (ir_state_kind_from_name(s, n, out)) return true;
  return fail_at(ps, s, "unknown state kind '%.*s' (kinds: weight, nontrainable, slot, scalar)", (int)n, s);
}

static bool parse_policy(parser *ps, ir_policy *out) {
  const char *s;
  size_t n;
  if (!lex_word(ps, false, &s, &n)) return expected(ps, "a policy name");
  if (ir_policy_from_name(s, n, out)) return true;
  str_buf names;
  str_buf_init(&names);
  for (int i = 1; i < IR_POLICY_COUNT; i++)
    str_buf_printf(&names, "%s%s", i > 1 ? ", " : "", ir_policy_name((ir_policy)i));
  fail_at(ps, s, "unknown policy '%.*s' (policies: %s)", (int)n, s, str_buf_cstr(&names));
  str_buf_fini(&names);
  return false;
}

/* TYPE = DTYPE '[' [DIM {',' DIM}] ']', DIM = 'N' | integer >= 0 (0: an empty tensor). */
/* '[' dims ']': integers >= 0, N only first; into out->rank/dims. */
static bool parse_dims(parser *ps, ir_type *out) {
  if (!expect_char(ps, '[', "'['")) return false;
  if (!accept_char(ps, ']')) {
    do {
      skip_blanks(ps);
      const char *at = ps->p;
      int64_t dim;
      if (ps->p < ps->end && *ps->p == 'N' &&
          (ps->p + 1 == ps->end || !(is_ident_char(ps->p[1]) || ps->p[1] == '.'))) {
        ps->p++;
        if (out->rank > 0)
          return fail_at(ps, at, "the batch dimension N may only be the first dimension");
        dim = IR_DIM_BATCH;
      } else {
        if (!lex_uint(ps, INT64_MAX, "a dimension (an integer >= 0 or N)", &dim)) return false;
      }
      if (out->rank == IR_MAX_RANK)
        return fail_at(ps, at, "rank exceeds the maximum of %d", IR_MAX_RANK);
      out->dims[out->rank++] = dim;
    } while (accept_char(ps, ','));
    if (!expect_char(ps, ']', "',' or ']' in the shape")) return false;
  }
  return true;
}

static bool parse_type(parser *ps, ir_type *out) {
  skip_blanks(ps);
  const char *start = ps->p;
  *out = (ir_type){0};
  if (!parse_dtype(ps, &out->dtype)) return false;
  skip_blanks(ps);
  if (ps->p >= ps->end || *ps->p != '[') return expected(ps, "'[' after the dtype");
  if (!parse_dims(ps, out)) return false;
  int64_t bytes;
  if (!ir_type_bytes(out, 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES) {
    str_buf b;
    str_buf_init(&b);
    ir_type_print(out, &b);
    fail_at(ps, start, "type %s is larger than the %lld-byte tensor limit", str_buf_cstr(&b),
            (long long)IR_MAX_TENSOR_BYTES);
    str_buf_fini(&b);
    return false;
  }
  return true;
}

/* '"' chars '"' with \" \\ and \xHH escapes; the value is arena-owned. */
static bool parse_string(parser *ps, const char **out) {
  skip_blanks(ps);
  const char *open = ps->p;
  if (ps->p == ps->end || *ps->p != '"') return expected(ps, "a quoted string");
  ps->p++;
  str_buf b;
  str_buf_init(&b);
  bool ok = false;
  for (;;) {
    if (ps->p == ps->end) {
      fail_at(ps, open, "unterminated string");
      break;
    }
    char c = *ps->p;
    if (c == '"') {
      ps->p++;
      ok = true;
      break;
    }
    if (c != '\\') {
      str_buf_putc(&b, c);
      ps->p++;
      continue;
    }
    const char *esc = ps->p++;
    if (ps->p < ps->end && (*ps->p == '"' || *ps->p == '\\')) {
      str_buf_putc(&b, *ps->p++);
      continue;
    }
    int v = 0, k = 0;
    if (ps->p < ps->end && *ps->p == 'x') {
      for (k = 0; k < 2 && ps->p + 1 + k < ps->end; k++) {
        char h = ps->p[1 + k];
        int x = is_digit(h) ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (x < 0) break;
        v = v * 16 + x;
      }
    }
    if (k != 2 || v == 0) {
      fail_at(ps, esc, "bad escape in string (use \\\", \\\\ or \\xHH with HH not 00)");
      break;
    }
    str_buf_putc(&b, (char)v);
    ps->p += 3;
  }
  if (ok) *out = arena_strndup(ps->g->arena, str_buf_cstr(&b), b.len);
  str_buf_fini(&b);
  return ok;
}

/* The keys op takes, for messages: "to", "axis, epsilon" (into b). */
static const char *keys_str(ir_op op, str_buf *b) {
  int n = 0;
  for (int k = 0; k < IR_ATTR_COUNT; k++)
    if (ir_op_attrs(op) >> k & 1) str_buf_printf(b, "%s%s", n++ ? ", " : "", ir_attr_name((ir_attr_key)k));
  return str_buf_cstr(b);
}

/* An integer [-]digits with |v| <= INT_MAX (attribute integers are small:
 * indices, axes). */
static bool lex_int(parser *ps, int64_t *out) {
  skip_blanks(ps);
  const char *s = ps->p;
  bool neg = ps->p < ps->end && *ps->p == '-';
  if (neg) ps->p++;
  if (ps->p == ps->end || !is_digit(*ps->p)) {
    ps->p = s;
    return expected(ps, "an integer");
  }
  int64_t v;
  if (!lex_uint(ps, INT_MAX, "an integer", &v)) return false;
  *out = neg ? -v : v;
  return true;
}

/* A decimal floating-point number as strtod reads it (no inf or nan). */
static bool lex_double(parser *ps, double *out) {
  skip_blanks(ps);
  const char *s = ps->p;
  char buf[64];
  size_t n = 0;
  while (s + n < ps->end && n + 1 < sizeof buf &&
         (is_digit(s[n]) || s[n] == '.' || s[n] == 'e' || s[n] == 'E' || s[n] == '-' || s[n] == '+'))
    n++;
  memcpy(buf, s, n);
  buf[n] = 0;
  char *end = NULL;
  double v = n ? strtod(buf, &end) : 0;
  if (n == 0 || (size_t)(end - buf) != n || !isfinite(v)) return expected(ps, "a finite decimal number");
  ps->p = s + n;
  *out = v;
  return true;
}

/* '[' [INT {',' INT}] ']': at most IR_MAX_INTS integers. */
static bool parse_ints(parser *ps, ir_attr_INTS *out) {
  *out = (ir_attr_INTS){0};
  if (!expect_char(ps, '[', "'['")) return false;
  if (accept_char(ps, ']')) return true;
  do {
    skip_blanks(ps);
    const char *at = ps->p;
    int64_t v;
    if (!lex_int(ps, &v)) return false;
    if (out->n == IR_MAX_INTS) return fail_at(ps, at, "more than %d integers in the list", IR_MAX_INTS);
    out->v[out->n++] = v;
  } while (accept_char(ps, ','));
  return expect_char(ps, ']', "',' or ']' in the list");
}

static bool parse_value(parser *ps, ir_attr_kind kind, void *slot) {
  switch (kind) {
  case IR_ATTR_KIND_INT: return lex_int(ps, slot);
  case IR_ATTR_KIND_FLOAT: return lex_double(ps, slot);
  case IR_ATTR_KIND_DTYPE: return parse_dtype(ps, slot);
  case IR_ATTR_KIND_STRING: return parse_string(ps, slot);
  case IR_ATTR_KIND_SHAPE: {
    ir_type t = {0};
    if (!parse_dims(ps, &t)) return false;
    ir_shape *sh = slot;
    sh->rank = t.rank;
    for (int r = 0; r < t.rank; r++) sh->dims[r] = t.dims[r];
    return true;
  }
  case IR_ATTR_KIND_INTS: return parse_ints(ps, slot);
  case IR_ATTR_KIND_STATE: return parse_state_kind(ps, slot);
  }
  CASTOR_UNREACHABLE();
  return false;
}

static bool parse_attr_value(parser *ps, ir_attr *a, ir_attr_key k) {
  return parse_value(ps, ir_attr_kind_of(k), ir_attr_slot(a, k));
}

/* LAYER: a word (the value-name rule) or a quoted string; arena-owned. */
static bool parse_layer(parser *ps, const char **out) {
  skip_blanks(ps);
  if (ps->p < ps->end && *ps->p == '"') return parse_string(ps, out);
  const char *s;
  size_t n;
  if (!lex_word(ps, true, &s, &n)) return expected(ps, "a layer name or a quoted string");
  *out = arena_strndup(ps->g->arena, s, n);
  return true;
}

/* The fields any node may carry in its dictionary, after the op's keys. */
enum { FIELD_POLICY = 1, FIELD_LAYER = 2, FIELD_RULE = 4, FIELD_COMPUTE = 8, FIELD_TRAINABLE = 16 };

static int node_field(const char *key, size_t len) {
  return word_is(key, len, "policy")  ? FIELD_POLICY
       : word_is(key, len, "layer")   ? FIELD_LAYER
       : word_is(key, len, "rule")    ? FIELD_RULE
       : word_is(key, len, "compute") ? FIELD_COMPUTE
       : word_is(key, len, "trainable") ? FIELD_TRAINABLE
                                      : 0;
}

/* compute=policy: the only value (ir_node.in_policy). */
static bool parse_compute(parser *ps, bool *out) {
  const char *s;
  size_t n;
  if (!lex_word(ps, false, &s, &n)) return expected(ps, "'policy'");
  if (!word_is(s, n, "policy")) return fail_at(ps, s, "unknown compute '%.*s' (only 'policy')", (int)n, s);
  return *out = true, true;
}

/* trainable=false: the only value, on a const only (ir_node.frozen). */
static bool parse_trainable(parser *ps, ir_node *node, const char *key) {
  const char *s;
  size_t n;
  if (node->op != IR_OP_CONST)
    return fail_at(ps, key, "trainable is a const's field (a constant training leaves as it is), not %s's",
                   ir_op_name(node->op));
  bool *frozen = &node->frozen;
  if (!lex_word(ps, false, &s, &n)) return expected(ps, "'false'");
  if (!word_is(s, n, "false"))
    return fail_at(ps, s, "unknown trainable '%.*s' (only 'false': a const is a weight unless it says so)", (int)n, s);
  return *frozen = true, true;
}

/* '{' ENTRY {',' ENTRY} '}' (the '{' already consumed), an ENTRY being an
 * op key (ir_ops.def) or a node field (policy, compute, trainable, layer, rule) '=' VALUE.
 * *out_seen gets the op's keys that were given. */
static bool parse_attrs(parser *ps, ir_node *n, ir_attr_set *out_seen) {
  ir_attr_set keys = ir_op_attrs(n->op);
  int seen_fields = 0;
  do {
    const char *key;
    size_t len;
    if (!lex_word(ps, false, &key, &len)) return expected(ps, "an attribute name");
    ir_attr_key k;
    bool is_op_key = ir_attr_from_name(key, len, &k) && (keys >> k & 1);
    int field = is_op_key ? 0 : node_field(key, len);
    if (!is_op_key && !field) {
      str_buf b;
      str_buf_init(&b);
      if (keys)
        fail_at(ps, key, "unknown attribute '%.*s' for %s (it takes %s, policy, compute, trainable, layer and rule)", (int)len, key,
                ir_op_name(n->op), keys_str(n->op, &b));
      else
        fail_at(ps, key, "unknown attribute '%.*s' for %s (it takes only policy, compute, trainable, layer and rule)", (int)len, key,
                ir_op_name(n->op));
      str_buf_fini(&b);
      return false;
    }
    if ((is_op_key && (*out_seen >> k & 1)) || (seen_fields & field))
      return fail_at(ps, key, "duplicate attribute '%.*s'", (int)len, key);
    if (!expect_char(ps, '=', "'=' after the attribute name")) return false;
    seen_fields |= field;
    bool ok = field == FIELD_POLICY ? parse_policy(ps, &n->policy)
            : field == FIELD_LAYER  ? parse_layer(ps, &n->layer)
            : field == FIELD_RULE   ? parse_string(ps, &n->rule)
            : field == FIELD_COMPUTE ? parse_compute(ps, &n->in_policy)
            : field == FIELD_TRAINABLE ? parse_trainable(ps, n, key)
                                    : (*out_seen |= (ir_attr_set)1 << k, parse_attr_value(ps, &n->attr, k));
    if (!ok) return false;
  } while (accept_char(ps, ','));
  return expect_char(ps, '}', "',' or '}' after the attribute");
}

/* '#' then the note: one space after '#' is dropped, the rest kept. */
static const char *parse_note(parser *ps) {
  const char *s = ps->p + 1;
  if (s < ps->end && *s == ' ') s++;
  ps->p = ps->end;
  return s == ps->end ? NULL : arena_strndup(ps->g->arena, s, (size_t)(ps->end - s));
}

static void type_str(const ir_type *t, char *buf, size_t n) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  snprintf(buf, n, "%s", str_buf_cstr(&b));
  str_buf_fini(&b);
}

/* %NAME = TYPE OP '(' [%SRC {',' %SRC}] ')' ['{' ENTRIES '}'] ['#' NOTE] */
static bool parse_node(parser *ps) {
  const char *pct = ps->p++; /* at '%' */
  const char *name;
  size_t name_len;
  if (ps->p == ps->end || !is_ident_start(*ps->p) || !lex_word(ps, true, &name, &name_len))
    return fail_at(ps, pct, "expected a value name after '%%' ([A-Za-z_][A-Za-z0-9_.]*)");
  ir_node *prev = hmap_get_str(&ps->values, name, name_len);
  if (prev) {
    fail_at(ps, pct, "redefinition of %%%.*s", (int)name_len, name);
    diag_note(ps->d, prev->loc, "previous definition of %%%s is here", prev->name);
    return false;
  }
  if (!expect_char(ps, '=', "'=' after the value name")) return false;
  skip_blanks(ps);
  const char *type_at = ps->p;
  ir_type declared;
  if (!parse_type(ps, &declared)) return false;

  const char *op_name;
  size_t op_len;
  ir_op op;
  if (!lex_word(ps, false, &op_name, &op_len)) return expected(ps, "an op name");
  if (!ir_op_from_name(op_name, op_len, &op)) return unknown_op(ps, op_name, op_len);

  if (!expect_char(ps, '(', "'(' after the op name")) return false;
  ir_node *srcs[IR_MAX_SRCS];
  int n_srcs = 0;
  if (!accept_char(ps, ')')) {
    do {
      skip_blanks(ps);
      const char *at = ps->p;
      const char *s;
      size_t n;
      if (ps->p == ps->end || *ps->p != '%') return expected(ps, "an operand ('%name')");
      ps->p++;
      if (ps->p == ps->end || !is_ident_start(*ps->p) || !lex_word(ps, true, &s, &n))
        return fail_at(ps, at, "expected a value name after '%%'");
      ir_node *src = hmap_get_str(&ps->values, s, n);
      if (!src) {
        if (n == name_len && memcmp(s, name, n) == 0)
          return fail_at(ps, at, "%%%.*s is used in its own definition", (int)n, s);
        return fail_at(ps, at, "undefined value %%%.*s", (int)n, s);
      }
      if (n_srcs < IR_MAX_SRCS) srcs[n_srcs] = src;
      n_srcs++; /* counted past IR_MAX_SRCS for the message below */
    } while (accept_char(ps, ','));
    if (!expect_char(ps, ')', "',' or ')' after the operand")) return false;
  }
  if (!ir_op_arity_ok(op, n_srcs))
    return fail_at(ps, op_name, "%s takes %s operand%s, got %d", ir_op_name(op), ir_op_arity_str(op),
                   ir_op_arity(op) == 1 ? "" : "s", n_srcs);

  char *name_z = arena_strndup(ps->g->arena, name, name_len);
  ir_node *node = ir_node_new(ps->g, op, &declared, srcs, n_srcs, name_z, node_loc_at(ps, pct));
  ir_attr_set seen = 0;
  if (accept_char(ps, '{') && !parse_attrs(ps, node, &seen)) return false;
  skip_blanks(ps);
  if (ps->p < ps->end && *ps->p == '#') node->note = parse_note(ps);
  if (!at_eol(ps)) return expected(ps, "'{', '#' or the end of the line");
  ir_attr_set missing = ir_op_attrs(op) & ~seen;
  for (int k = 0; k < IR_ATTR_COUNT; k++)
    if (missing >> k & 1)
      return fail_at(ps, op_name, "%s needs the attribute '%s'", ir_op_name(op), ir_attr_name((ir_attr_key)k));

  if (!(ir_op_flags(op) & IR_OPF_LEAF)) {
    ir_type inferred;
    char err[256];
    if (!ir_infer_type(op, srcs, n_srcs, &node->attr, &inferred, err, sizeof err))
      return fail_at(ps, op_name, "%s", err);
    if (!ir_result_type_ok(op, &node->attr, &inferred, &declared)) {
      char d[96], i[96];
      type_str(&declared, d, sizeof d);
      type_str(&inferred, i, sizeof i);
      str_buf operands;
      str_buf_init(&operands);
      for (int k = 0; k < n_srcs; k++) {
        str_buf_puts(&operands, k == 0 ? "" : k + 1 == n_srcs ? " and " : ", ");
        ir_type_print(&srcs[k]->type, &operands);
      }
      fail_at(ps, type_at, "declared type %s does not match the inferred type %s: %s of %s", d, i,
              ir_op_name(op), str_buf_cstr(&operands));
      str_buf_fini(&operands);
      return false;
    }
  }
  ir_graph_append(ps->g, node);
  hmap_put_str(&ps->values, node->name, name_len, node);
  return true;
}

/* output NAME '=' %VALUE (the keyword already consumed) */
static bool parse_output(parser *ps) {
  const char *name;
  size_t len;
  if (!lex_word(ps, true, &name, &len)) return expected(ps, "an output name");
  const char *dot = memchr(name, '.', len);
  if (dot) return fail_at(ps, dot, "output names may not contain '.' ([A-Za-z_][A-Za-z0-9_]*)");
  if (hmap_get_str(&ps->outputs, name, len))
    return fail_at(ps, name, "duplicate output '%.*s'", (int)len, name);
  if (!expect_char(ps, '=', "'=' after the output name")) return false;
  skip_blanks(ps);
  const char *at = ps->p, *s;
  size_t n;
  if (ps->p == ps->end || *ps->p != '%') return expected(ps, "a value ('%name')");
  ps->p++;
  if (ps->p == ps->end || !is_ident_start(*ps->p) || !lex_word(ps, true, &s, &n))
    return fail_at(ps, at, "expected a value name after '%%'");
  ir_node *value = hmap_get_str(&ps->values, s, n);
  if (!value) return fail_at(ps, at, "undefined value %%%.*s", (int)n, s);
  skip_blanks(ps);
  if (ps->p < ps->end && *ps->p == '#') ps->p = ps->end; /* a comment */
  if (!at_eol(ps)) return expected(ps, "the end of the line");
  char *name_z = arena_strndup(ps->g->arena, name, len);
  ir_graph_add_output(ps->g, name_z, value);
  hmap_put_str(&ps->outputs, name_z, len, value);
  return true;
}

/* graph NAME policy '=' POLICY (the keyword already consumed). Graph names
 * are value names that may also hold '-'. */
static bool parse_header(parser *ps, const char *kw) {
  skip_blanks(ps);
  const char *name = ps->p, *key;
  if (ps->p == ps->end || !is_ident_start(*ps->p)) return expected(ps, "a graph name");
  while (ps->p < ps->end && (is_ident_char(*ps->p) || *ps->p == '.' || *ps->p == '-')) ps->p++;
  size_t len = (size_t)(ps->p - name), key_len;
  skip_blanks(ps);
  const char *at = ps->p;
  if (!lex_word(ps, false, &key, &key_len) || !word_is(key, key_len, "policy")) {
    ps->p = at;
    return expected(ps, "'policy=' after the graph name");
  }
  ir_policy policy;
  if (!expect_char(ps, '=', "'=' after 'policy'") || !parse_policy(ps, &policy)) return false;
  skip_blanks(ps);
  if (ps->p < ps->end && *ps->p == '#') ps->p = ps->end; /* a comment */
  if (!at_eol(ps)) return expected(ps, "the end of the line");
  char *name_z = xmalloc(len + 1);
  memcpy(name_z, name, len);
  name_z[len] = 0;
  ps->g = ir_graph_create(name_z);
  free(name_z);
  ps->g->policy = policy;
  ps->node_file = arena_strdup(ps->g->arena, ps->file);
  ps->header = loc_at(ps, kw);
  return true;
}

/* ---- whole text ---- */


/* Rejects bytes that are not UTF-8, NUL and control characters other than
 * tab and line ends, and a \r not followed by \n, before any parsing. */
static bool check_bytes(parser *ps, const char *text, size_t len) {
  const char *line = text;
  int line_no = 1;
  for (size_t i = 0; i < len;) {
    unsigned char c = (unsigned char)text[i];
    const char *why = NULL;
    int n = str_utf8_len((const unsigned char *)text + i, len - i);
    if (n == 0) why = "invalid UTF-8 byte 0x%02x";
    else if (c == '\r' && (i + 1 == len || text[i + 1] != '\n'))
      why = "carriage return (0x%02x) not followed by a line feed";
    else if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
      why = "unexpected control character 0x%02x";
    if (why) {
      diag_error(ps->d, ((diag_loc){ps->file, line_no, (int)(text + i - line) + 1}), why, c);
      return false;
    }
    if (c == '\n') line = text + i + 1, line_no++;
    i += (size_t)n;
  }
  return true;
}

static bool parse_text(parser *ps, const char *text, size_t len) {
  if (!check_bytes(ps, text, len)) return false;
  const char *end = text + len;
  ps->line_no = 0;
  for (size_t at = 0; at < len || ps->line_no == 0;) {
    const char *line = text + at;
    const char *eol = memchr(line, '\n', len - at);
    if (!eol) eol = end;
    at = eol == end ? len : (size_t)(eol - text) + 1;
    ps->line_no++;
    ps->line = ps->p = line;
    ps->end = eol;
    while (ps->end > line && (ps->end[-1] == '\r' || is_blank(ps->end[-1]))) ps->end--;

    if (at_eol(ps) || *ps->p == '#') continue;
    const char *kw = ps->p, *w;
    size_t wn = 0;
    if (*ps->p != '%') lex_word(ps, false, &w, &wn);
    bool is_graph = wn && word_is(w, wn, "graph");
    bool is_output = wn && word_is(w, wn, "output");
    if (!ps->g) {
      if (!is_graph) {
        ps->p = kw;
        return fail_at(ps, kw, "missing 'graph NAME policy=POLICY' header before the first line");
      }
      if (!parse_header(ps, kw)) return false;
      continue;
    }
    if (*kw == '%') {
      if (!parse_node(ps)) return false;
    } else if (is_output) {
      if (!parse_output(ps)) return false;
    } else if (is_graph) {
      return fail_at(ps, kw, "a second 'graph' header (one graph per file)");
    } else {
      ps->p = kw;
      return expected(ps, "a node ('%name = ...'), an 'output' line or a comment");
    }
  }
  if (!ps->g) {
    ps->line = ps->p = text, ps->line_no = 1;
    return fail_at(ps, text, "missing 'graph NAME policy=POLICY' header (the text is empty)");
  }
  if (ps->g->n_outputs == 0) {
    diag_error(ps->d, ps->header, "graph %s has no outputs (add 'output NAME = %%value')",
               ps->g->name);
    return false;
  }
  return true;
}

bool ir_attr_value_parse(ir_graph *g, ir_attr_kind kind, const char *file, const char *text, size_t len,
                         void *out, diag_sink *d) {
  parser ps = {.d = d, .file = diag_intern(d, file ? file : "<attribute>"), .g = g}; /* no maps used */
  diag_sink_add_source(d, ps.file, text, len);
  const char *eol = memchr(text, '\n', len);
  ps.line = ps.p = text;
  ps.end = eol ? eol : text + len;
  ps.line_no = 1;
  if (!parse_value(&ps, kind, out)) return false;
  return at_eol(&ps) || expected(&ps, "the end of the value");
}

ir_graph *ir_parse(const char *file, const char *text, size_t len, diag_sink *d) {
  if (!text) text = "", len = 0;
  parser ps = {.d = d, .file = diag_intern(d, file ? file : "<input>")};
  hmap_init(&ps.values, HMAP_STRINGS);
  hmap_init(&ps.outputs, HMAP_STRINGS);
  diag_sink_add_source(d, ps.file, text, len);
  bool ok = parse_text(&ps, text, len);
  hmap_fini(&ps.values);
  hmap_fini(&ps.outputs);
  if (!ok) {
    ir_graph_destroy(ps.g);
    return NULL;
  }
  return ps.g;
}
