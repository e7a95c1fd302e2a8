/* SPDX-License-Identifier: Apache-2.0 */
/*
 * parse.c: the second stage of the frontend. A recursive-descent parser
 * over the lexer's tokens, one statement per line (grammar in
 * docs/cast-language.md). Header statements (model, policy, weights,
 * output) are recorded in fe_model directly; a layer call is handed to
 * layers.c, which checks its attributes.
 *
 * Error recovery is per line: at the first error of a statement the rest of
 * the line is skipped and parsing resumes on the next one, so every broken
 * line gives one diagnostic and good lines are still checked. Keywords are
 * contextual: `output = dense(...)` defines a value called output.
 */
#include "frontend/cast/internal.h"

#include <stdio.h>
#include <string.h>

enum { MAX_LIST_DEPTH = 8 };

typedef struct parser {
  fe_model *m;
  fe_lexer lx;
  fe_token tok;
  fe_token peek;
  bool has_peek;
  int n_stmts;
} parser;

static void advance(parser *p) {
  if (p->has_peek) {
    p->tok = p->peek;
    p->has_peek = false;
  } else {
    p->tok = fe_lexer_next(&p->lx);
  }
}

static const fe_token *peek(parser *p) {
  if (!p->has_peek) {
    p->peek = fe_lexer_next(&p->lx);
    p->has_peek = true;
  }
  return &p->peek;
}

static bool at_eol(const fe_token *t) {
  return t->kind == FE_TOK_NEWLINE || t->kind == FE_TOK_EOF;
}

/* Moves to the newline (or EOF) that ends the current statement. */
static void recover(parser *p) {
  if (at_eol(&p->tok)) return;
  if (p->has_peek && at_eol(&p->peek)) {
    advance(p);
    return;
  }
  p->has_peek = false;
  fe_lexer_skip_line(&p->lx);
  p->tok = fe_lexer_next(&p->lx);
}

/* A short description of a token for "expected X, got Y" messages. */
static const char *describe(parser *p, const fe_token *t) {
  switch (t->kind) {
  case FE_TOK_EOF: return "end of file";
  case FE_TOK_NEWLINE: return "end of line";
  case FE_TOK_IDENT:
  case FE_TOK_INT:
  case FE_TOK_FLOAT: return arena_printf(p->m->arena, "'%s'", t->text);
  case FE_TOK_STRING: return "a string";
  case FE_TOK_LPAREN: return "'('";
  case FE_TOK_RPAREN: return "')'";
  case FE_TOK_LBRACKET: return "'['";
  case FE_TOK_RBRACKET: return "']'";
  case FE_TOK_COMMA: return "','";
  case FE_TOK_EQ: return "'='";
  case FE_TOK_ERROR: return "an invalid token";
  }
  return "?";
}

/* Reports "expected WHAT, got TOKEN" at the current token, unless the lexer
 * already reported it. Always returns false. */
static bool expected(parser *p, const char *what) {
  if (p->tok.kind != FE_TOK_ERROR)
    diag_error(p->m->d, p->tok.loc, "expected %s, got %s", what, describe(p, &p->tok));
  return false;
}

static bool expect(parser *p, fe_tok_kind k, const char *what) {
  if (p->tok.kind != k) return expected(p, what);
  advance(p);
  return true;
}

static bool parse_value(parser *p, fe_value *out, int depth);

static bool parse_list(parser *p, fe_value *out, int depth) {
  *out = (fe_value){.kind = FE_VAL_LIST, .loc = p->tok.loc};
  if (depth >= MAX_LIST_DEPTH) {
    diag_error(p->m->d, p->tok.loc, "lists nested more than %d deep", MAX_LIST_DEPTH);
    return false;
  }
  advance(p); /* '[' */
  VEC(fe_value) items = {0};
  bool ok = true;
  while (p->tok.kind != FE_TOK_RBRACKET) {
    fe_value v;
    if (!(ok = parse_value(p, &v, depth + 1))) break;
    vec_push(&items, v);
    if (p->tok.kind == FE_TOK_COMMA) {
      advance(p);
    } else if (p->tok.kind != FE_TOK_RBRACKET) {
      ok = expected(p, "',' or ']' in the list");
      break;
    }
  }
  if (ok) advance(p); /* ']' */
  out->n_items = (int)items.len;
  out->items = arena_alloc(p->m->arena, items.len * sizeof *items.data + 1);
  if (items.len) memcpy(out->items, items.data, items.len * sizeof *items.data);
  vec_free(&items);
  return ok;
}

static bool parse_value(parser *p, fe_value *out, int depth) {
  const fe_token *t = &p->tok;
  switch (t->kind) {
  case FE_TOK_IDENT:
    *out = (fe_value){.kind = FE_VAL_IDENT, .str = t->text, .loc = t->loc};
    break;
  case FE_TOK_INT:
    *out = (fe_value){.kind = FE_VAL_INT, .str = t->text, .ival = t->ival, .dval = t->dval, .loc = t->loc};
    break;
  case FE_TOK_FLOAT: /* CNN */
    *out = (fe_value){.kind = FE_VAL_FLOAT, .str = t->text, .dval = t->dval, .loc = t->loc};
    break;
  case FE_TOK_STRING:
    *out = (fe_value){.kind = FE_VAL_STRING, .str = t->text, .loc = t->loc};
    break;
  case FE_TOK_LBRACKET:
    return parse_list(p, out, depth);
  case FE_TOK_EOF:
  case FE_TOK_NEWLINE:
  case FE_TOK_LPAREN:
  case FE_TOK_RPAREN:
  case FE_TOK_RBRACKET:
  case FE_TOK_COMMA:
  case FE_TOK_EQ:
  case FE_TOK_ERROR:
    return expected(p, "a value");
  }
  advance(p);
  return true;
}

/* NAME = LAYER(args) */
static bool parse_layer(parser *p) {
  fe_call call = {.seq = p->n_stmts, .var = p->tok.text, .var_loc = p->tok.loc};
  advance(p); /* NAME */
  advance(p); /* '=' */
  call.callee_loc = p->tok.loc;
  if (p->tok.kind != FE_TOK_IDENT) {
    fe_layer_add_broken(p->m, &call);
    return expected(p, "a layer such as dense(...) after '='");
  }
  call.callee = p->tok.text;
  advance(p);
  if (p->tok.kind != FE_TOK_LPAREN) {
    fe_layer_add_broken(p->m, &call);
    return expected(p, arena_printf(p->m->arena, "'(' after '%s'", call.callee));
  }
  advance(p);
  VEC(fe_arg) args = {0};
  bool ok = true, seen_key = false;
  while (p->tok.kind != FE_TOK_RPAREN) {
    fe_arg a = {0};
    if (p->tok.kind == FE_TOK_IDENT && peek(p)->kind == FE_TOK_EQ) {
      a.key = p->tok.text;
      a.key_loc = p->tok.loc;
      advance(p);
      advance(p);
      seen_key = true;
    } else if (seen_key && !at_eol(&p->tok) && p->tok.kind != FE_TOK_ERROR) {
      diag_error(p->m->d, p->tok.loc, "positional argument after keyword arguments");
      ok = false;
      break;
    }
    if (!(ok = parse_value(p, &a.value, 0))) break;
    vec_push(&args, a);
    if (p->tok.kind == FE_TOK_COMMA) {
      advance(p);
    } else if (p->tok.kind != FE_TOK_RPAREN) {
      ok = expected(p, "',' or ')'");
      break;
    }
  }
  if (ok) {
    advance(p); /* ')' */
    call.n_args = (int)args.len;
    call.args = arena_alloc(p->m->arena, args.len * sizeof *args.data + 1);
    if (args.len) memcpy(call.args, args.data, args.len * sizeof *args.data);
    fe_layer_add(p->m, &call); /* complete: trailing junk does not undefine it */
    if (!at_eol(&p->tok)) ok = expected(p, "end of line after the layer call");
  } else {
    fe_layer_add_broken(p->m, &call);
  }
  vec_free(&args);
  return ok;
}

static bool parse_output(parser *p) {
  advance(p); /* output */
  for (;;) {
    if (p->tok.kind != FE_TOK_IDENT) return expected(p, "a value name");
    fe_output o = {.seq = p->n_stmts, .use = {.var = p->tok.text, .loc = p->tok.loc}};
    vec_push(&p->m->outputs, o);
    advance(p);
    if (p->tok.kind != FE_TOK_COMMA) break;
    advance(p);
  }
  return at_eol(&p->tok) || expected(p, "',' or end of line");
}

/* model NAME | policy P | weights "path" */
static bool parse_header(parser *p, const char *kw) {
  fe_model *m = p->m;
  diag_loc loc = p->tok.loc;
  bool is_model = str_eq(kw, "model"), is_policy = str_eq(kw, "policy");
  advance(p);
  fe_token arg = p->tok;
  if (is_policy && p->tok.kind == FE_TOK_STRING) {
    advance(p); /* a name may be quoted where a value is expected (docs/cast-language.md) */
  } else if (is_model || is_policy) {
    if (!expect(p, FE_TOK_IDENT, is_model ? "a model name" : "a policy name")) return false;
  } else if (!expect(p, FE_TOK_STRING, "a file name in quotes after 'weights'")) {
    return false;
  }
  bool trailing_ok = at_eol(&p->tok) || expected(p, "end of line");
  if (is_model && m->name) {
    diag_error(m->d, loc, "'model' may appear only once");
    diag_note(m->d, m->model_loc, "first 'model' statement is here");
    return trailing_ok;
  }
  const diag_loc *prev = is_model ? NULL : is_policy ? &m->policy_loc : &m->weights_loc;
  if (prev && prev->line > 0) {
    diag_error(m->d, loc, "duplicate '%s' statement", kw);
    diag_note(m->d, *prev, "previous '%s' statement is here", kw);
    return trailing_ok;
  }
  if (is_model) {
    m->name = arg.text;
    m->model_loc = loc;
  } else if (is_policy) {
    m->policy_loc = loc;
    fe_value v = {.kind = arg.kind == FE_TOK_STRING ? FE_VAL_STRING : FE_VAL_IDENT, .str = arg.text,
                  .loc = arg.loc};
    fe_policy_parse(m, &v, &m->policy);
  } else {
    m->weights = arg.text;
    m->weights_loc = loc;
  }
  return trailing_ok;
}

/* compile loss=NAME, optimizer=NAME, metrics=[accuracy], from_logits=true */
static bool parse_compile(parser *p) {
  fe_model *m = p->m;
  diag_loc loc = p->tok.loc;
  advance(p); /* compile */
  if (m->compile_loc.line > 0) {
    diag_error(m->d, loc, "duplicate 'compile' statement");
    diag_note(m->d, m->compile_loc, "previous 'compile' statement is here");
    return false;
  }
  m->compile_loc = loc;
  fe_train_defaults *c = &m->compile;
  c->present = true;
  static const char *const keys[] = {"loss", "optimizer", "metrics", "from_logits"};
  static const char *const losses[] = {"sparse_categorical_crossentropy", "categorical_crossentropy",
                                       "mean_squared_error", "mse"};
  static const char *const optimizers[] = {"sgd", "rmsprop", "adam"};
  for (;;) {
    if (p->tok.kind != FE_TOK_IDENT || peek(p)->kind != FE_TOK_EQ) return expected(p, "KEY=VALUE (loss, optimizer, metrics, from_logits)");
    const char *key = p->tok.text;
    diag_loc key_loc = p->tok.loc;
    advance(p), advance(p);
    fe_value v;
    if (!parse_value(p, &v, 0)) return false;
    int k = 0;
    while (k < 4 && !str_eq(key, keys[k])) k++;
    if (k == 4) {
      const char *near = fe_closest(key, keys, 4);
      diag_error(m->d, key_loc, "unknown compile option '%s'%s%s%s (options: loss, optimizer, metrics, from_logits)", key,
                 near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
      return false;
    }
    if (k == 2) { /* metrics=[accuracy] */
      bool ok = v.kind == FE_VAL_LIST;
      for (int i = 0; ok && i < v.n_items; i++) ok = v.items[i].kind == FE_VAL_IDENT && str_eq(v.items[i].str, "accuracy");
      if (!ok) {
        diag_error(m->d, v.loc, "metrics takes a list of metric names; castor computes [accuracy]");
        return false;
      }
      c->accuracy = v.n_items > 0;
    } else if (k == 3) {
      if (v.kind != FE_VAL_IDENT || (!str_eq(v.str, "true") && !str_eq(v.str, "false"))) {
        diag_error(m->d, v.loc, "from_logits takes true or false");
        return false;
      }
      c->from_logits = str_eq(v.str, "true");
    } else if (v.kind != FE_VAL_IDENT) {
      diag_error(m->d, v.loc, "%s takes a name, not %s", key, v.kind == FE_VAL_STRING ? "a string" : "a number or list");
      return false;
    } else if (k == 3) {
      if (!str_eq(v.str, "true") && !str_eq(v.str, "false")) {
        diag_error(m->d, v.loc, "from_logits takes true or false, not '%s'", v.str);
        return false;
      }
      c->from_logits = str_eq(v.str, "true");
    } else {
      const char *const *names = k == 0 ? losses : optimizers;
      int n = k == 0 ? 4 : 3, i = 0;
      while (i < n && !str_eq(v.str, names[i])) i++;
      if (i == n) {
        const char *near = fe_closest(v.str, names, n);
        diag_error(m->d, v.loc, "unknown %s '%s'%s%s%s (%s)", key, v.str, near ? "; did you mean '" : "",
                   near ? near : "", near ? "'?" : "",
                   k == 0 ? "losses: sparse_categorical_crossentropy, categorical_crossentropy, mean_squared_error"
                          : "optimizers: sgd, rmsprop, adam");
        return false;
      }
      snprintf(k == 0 ? c->loss : c->optimizer, k == 0 ? sizeof c->loss : sizeof c->optimizer, "%s", v.str);
    }
    if (p->tok.kind != FE_TOK_COMMA) break;
    advance(p);
  }
  return at_eol(&p->tok) || expected(p, "',' or end of line");
}

static const char *const keywords[] = {"model", "policy", "weights", "output", "compile"};
enum { N_KEYWORDS = sizeof keywords / sizeof keywords[0] };

static bool parse_statement(parser *p) {
  fe_model *m = p->m;
  if (p->tok.kind != FE_TOK_IDENT) return expected(p, "a statement");
  const char *word = p->tok.text;
  bool is_layer = peek(p)->kind == FE_TOK_EQ, is_keyword = false;
  for (int i = 0; i < N_KEYWORDS; i++) is_keyword |= str_eq(word, keywords[i]);
  if (p->n_stmts == 0 && (is_layer || is_keyword) && (is_layer || !str_eq(word, "model"))) {
    diag_error(m->d, p->tok.loc, "a model file must start with 'model NAME'");
    m->model_loc = p->tok.loc; /* keep going; the missing name fails the load */
  }
  if (is_layer) return parse_layer(p);
  if (str_eq(word, "output")) return parse_output(p);
  if (str_eq(word, "compile")) return parse_compile(p);
  if (is_keyword) return parse_header(p, word);
  const char *near = fe_closest(word, keywords, N_KEYWORDS);
  if (near)
    diag_error(m->d, p->tok.loc, "unknown statement '%s'; did you mean '%s'?", word, near);
  else if (at_eol(peek(p)))
    diag_error(m->d, p->tok.loc, "unknown statement '%s'", word);
  else
    diag_error(m->d, peek(p)->loc, "expected '=' after '%s', got %s", word, describe(p, peek(p)));
  return false;
}

void fe_parse(fe_model *m, const char *text, size_t len) {
  parser p = {.m = m};
  int errors = diag_error_count(m->d);
  fe_lexer_init(&p.lx, m->file, text, len, m->arena, m->d);
  advance(&p);
  while (p.tok.kind != FE_TOK_EOF) {
    if (fe_error_limit(m)) return;
    if (p.tok.kind == FE_TOK_NEWLINE) {
      advance(&p);
      continue;
    }
    if (!parse_statement(&p)) recover(&p);
    p.n_stmts++;
  }
  m->n_stmts = p.n_stmts;
  if (p.n_stmts == 0 && diag_error_count(m->d) == errors) {
    diag_error(m->d, (diag_loc){m->file, 1, 1}, "empty model file");
  } else if (m->name && m->outputs.len == 0) {
    diag_error(m->d, m->model_loc, "model '%s' has no output statement", m->name);
  }
}
