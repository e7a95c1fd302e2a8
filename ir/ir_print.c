/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ir_print.c: the canonical text form of a graph (grammar in ir/README.md).
 *
 *   graph NAME policy=POLICY
 *   %NAME = TYPE OP(%SRC, ...) {ATTR=V, ..., policy=P, layer=L, rule="R"}  # NOTE
 *   output NAME = %VALUE
 *
 * ir_parse reads this back, and printing what it read gives the same bytes,
 * so dumps diff cleanly and golden tests are plain text. The printer never
 * fails on a graph with valid ranks: it prints whatever the graph holds ('?'
 * where a name, a source, an op or a dtype is missing or out of range) so
 * that a graph the verifier rejects can still be shown.
 *
 * policy, layer and rule are node fields printed in the dictionary after the
 * op's attributes, each only when the node has it. Notes are free text on
 * one line, for people: nothing is read back out of them. So that every printed note reads back as
 * itself, control characters other than tab print as spaces, trailing
 * blanks are dropped, bytes that are not UTF-8 print as '?', and an empty
 * note prints nothing. Weight keys are quoted with \" and \\ escaped, and
 * control bytes and bytes that are not UTF-8 as \xHH.
 */
#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_value_ref(const ir_node *n, str_buf *out) {
  str_buf_putc(out, '%');
  str_buf_puts(out, n && n->name && n->name[0] ? n->name : "?");
}


static void print_string(const char *s, str_buf *out) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  size_t n = strlen((const char *)p);
  str_buf_putc(out, '"');
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    int len = (int)str_utf8_len(p + i, n - i);
    if (c == '"' || c == '\\') {
      str_buf_putc(out, '\\');
      str_buf_putc(out, (char)c);
    } else if (c < 0x20 || c == 0x7f || len == 0) {
      char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
      str_buf_append(out, esc, sizeof esc);
    } else {
      str_buf_append(out, (const char *)p + i, (size_t)len);
      i += (size_t)len;
      continue;
    }
    i++;
  }
  str_buf_putc(out, '"');
}

/* A layer name: bare when it reads back as one word (value-name rule),
 * quoted otherwise. */
static void print_name(const char *s, str_buf *out) {
  bool word = s[0] && ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_');
  for (const char *p = s; word && *p; p++)
    word = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
           *p == '.';
  if (word) str_buf_puts(out, s);
  else print_string(s, out);
}

/* Prints "  # note" as the parser will read it back (see the file comment). */
static void print_note(const char *note, str_buf *out) {
  if (!note) return;
  size_t n = strlen(note);
  while (n > 0 && (note[n - 1] == ' ' || note[n - 1] == '\t' ||
                   (unsigned char)note[n - 1] < 0x20 || note[n - 1] == 0x7f))
    n--;
  if (n == 0) return;
  str_buf_puts(out, "  # ");
  const unsigned char *p = (const unsigned char *)note;
  for (size_t i = 0; i < n;) {
    int len = (int)str_utf8_len(p + i, n - i);
    if (len == 0) {
      str_buf_putc(out, '?');
      i++;
    } else if (len == 1 && ((p[i] < 0x20 && p[i] != '\t') || p[i] == 0x7f)) {
      str_buf_putc(out, ' ');
      i++;
    } else {
      str_buf_append(out, note + i, (size_t)len);
      i += (size_t)len;
    }
  }
}

static void print_shape(const ir_shape *sh, str_buf *out) {
  str_buf_putc(out, '[');
  for (int r = 0; r < sh->rank && r < IR_MAX_RANK; r++) {
    if (r) str_buf_putc(out, ',');
    if (sh->dims[r] == IR_DIM_BATCH) str_buf_putc(out, 'N');
    else str_buf_printf(out, "%lld", (long long)sh->dims[r]);
  }
  str_buf_putc(out, ']');
}

static void print_ints(const ir_attr_INTS *v, str_buf *out) {
  str_buf_putc(out, '[');
  for (int i = 0; i < v->n && i < IR_MAX_INTS; i++) str_buf_printf(out, "%s%lld", i ? "," : "", (long long)v->v[i]);
  str_buf_putc(out, ']');
}

/* The shortest %g form that reads back as the same double. */
static void print_double(double v, str_buf *out) {
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  str_buf_puts(out, buf);
}

void ir_attr_print(const ir_attr *a, ir_attr_key k, str_buf *out) {
  ir_attr_value_print(ir_attr_kind_of(k), ir_attr_get(a, k), out);
}

void ir_attr_value_print(ir_attr_kind kind, const void *v, str_buf *out) {
  switch (kind) {
  case IR_ATTR_KIND_INT: str_buf_printf(out, "%lld", (long long)*(const ir_attr_INT *)v); break;
  case IR_ATTR_KIND_FLOAT: print_double(*(const ir_attr_FLOAT *)v, out); break;
  case IR_ATTR_KIND_DTYPE: str_buf_puts(out, dtype_name(*(const ir_attr_DTYPE *)v)); break;
  case IR_ATTR_KIND_STRING: print_string(*(const ir_attr_STRING *)v, out); break;
  case IR_ATTR_KIND_SHAPE: print_shape(v, out); break;
  case IR_ATTR_KIND_INTS: print_ints(v, out); break;
  case IR_ATTR_KIND_STATE: str_buf_puts(out, ir_state_kind_name(*(const ir_attr_STATE *)v)); break;
  }
}

/* The op's own attributes in ir_attrs.def order; false if it has none. */
static bool print_op_attrs(const ir_node *n, str_buf *out) {
  ir_attr_set keys = (unsigned)n->op < IR_OP_COUNT ? ir_op_attrs(n->op) : 0;
  bool any = false;
  for (int k = 0; k < IR_ATTR_COUNT; k++) {
    if (!(keys >> k & 1)) continue;
    if (any) str_buf_puts(out, ", ");
    str_buf_printf(out, "%s=", ir_attr_name((ir_attr_key)k));
    ir_attr_print(&n->attr, (ir_attr_key)k, out);
    any = true;
  }
  return any;
}

/* One node, without the line end. */
void ir_print_node(const ir_node *n, str_buf *out) {
  print_value_ref(n, out);
  str_buf_puts(out, " = ");
  ir_type_print(&n->type, out);
  str_buf_putc(out, ' ');
  str_buf_puts(out, ir_op_name(n->op));
  str_buf_putc(out, '(');
  for (int i = 0; i < n->n_srcs && i < IR_MAX_SRCS; i++) {
    if (i) str_buf_puts(out, ", ");
    print_value_ref(n->srcs[i], out);
  }
  str_buf_putc(out, ')');

  str_buf attrs;
  str_buf_init(&attrs);
  bool any = print_op_attrs(n, &attrs);
  if (n->policy != IR_POLICY_NONE) {
    if (any) str_buf_puts(&attrs, ", ");
    str_buf_printf(&attrs, "policy=%s", ir_policy_name(n->policy));
    any = true;
  }
  if (n->in_policy) {
    str_buf_puts(&attrs, any ? ", compute=policy" : "compute=policy");
    any = true;
  }
  if (n->frozen) {
    str_buf_puts(&attrs, any ? ", trainable=false" : "trainable=false");
    any = true;
  }
  if (n->layer) {
    str_buf_puts(&attrs, any ? ", layer=" : "layer=");
    print_name(n->layer, &attrs);
    any = true;
  }
  if (n->rule) {
    str_buf_puts(&attrs, any ? ", rule=" : "rule=");
    print_string(n->rule, &attrs);
    any = true;
  }
  if (any) str_buf_printf(out, " {%s}", str_buf_cstr(&attrs));
  str_buf_fini(&attrs);
  print_note(n->note, out);
}

void ir_print(const ir_graph *g, str_buf *out) {
  str_buf_printf(out, "graph %s policy=%s\n", g->name ? g->name : "?", ir_policy_name(g->policy));
  for (int i = 0; i < g->n_nodes; i++) {
    ir_print_node(g->nodes[i], out);
    str_buf_putc(out, '\n');
  }
  for (int i = 0; i < g->n_outputs; i++) {
    str_buf_printf(out, "output %s = ", g->outputs[i].name ? g->outputs[i].name : "?");
    print_value_ref(g->outputs[i].value, out);
    str_buf_putc(out, '\n');
  }
}
