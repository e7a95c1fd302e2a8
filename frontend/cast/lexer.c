/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lexer.c: the first stage of the frontend. Turns the bytes of a .cast file
 * into tokens, pulled one at a time by the parser so that lexical and
 * syntax errors come out in line order.
 *
 * Invariants:
 * - Locations are 1-based lines and 1-based byte columns (the sink's caret
 *   renderer skips UTF-8 continuation bytes, so the caret still lands right).
 * - The whole file must be UTF-8, comments and strings included; the first
 *   bad byte of a line is reported with its exact column.
 * - After an error the lexer has skipped to the end of the line and returns
 *   FE_TOK_ERROR; the next token is that line's newline. Nothing loops: every
 *   call consumes at least one byte or returns EOF.
 */
#include "frontend/cast/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void fe_lexer_init(fe_lexer *lx, const char *file, const char *text, size_t len, arena *a,
                   diag_sink *d) {
  *lx = (fe_lexer){.file = file, .text = text, .len = len, .line = 1, .arena = a, .d = d};
}

static diag_loc loc_at(const fe_lexer *lx, size_t pos) {
  return (diag_loc){lx->file, lx->line, (int)(pos - lx->line_start) + 1};
}

void fe_lexer_skip_line(fe_lexer *lx) {
  while (lx->pos < lx->len && lx->text[lx->pos] != '\n') lx->pos++;
}

static fe_token error_token(fe_lexer *lx, size_t pos) {
  fe_token t = {.kind = FE_TOK_ERROR, .loc = loc_at(lx, pos)};
  fe_lexer_skip_line(lx);
  return t;
}


/* Checks that the bytes at pos start valid UTF-8; reports the bad byte. */
static bool check_utf8(fe_lexer *lx, size_t pos, size_t *out_n) {
  size_t n = str_utf8_len(lx->text + pos, lx->len - pos);
  if (n == 0) {
    diag_error(lx->d, loc_at(lx, pos), "invalid UTF-8 byte 0x%02x",
               (unsigned char)lx->text[pos]);
    return false;
  }
  *out_n = n;
  return true;
}

static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

static fe_token lex_comment(fe_lexer *lx) {
  while (lx->pos < lx->len && lx->text[lx->pos] != '\n') {
    size_t n;
    if (!check_utf8(lx, lx->pos, &n)) return error_token(lx, lx->pos);
    lx->pos += n;
  }
  return fe_lexer_next(lx);
}

/* CNN: a decimal number (digits, a '.', digits, an exponent e[+-]digits;
 * a '.' or an exponent makes it one), finite; false if spell is not one. */
static bool decimal(const char *spell, double *out) {
  const char *p = spell + (*spell == '-');
  int digits = 0;
  bool dot = false, exp = false;
  while (*p >= '0' && *p <= '9') p++, digits++;
  if (*p == '.') {
    dot = true, p++;
    while (*p >= '0' && *p <= '9') p++, digits++;
  }
  if (digits && (*p == 'e' || *p == 'E')) {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!(*p >= '0' && *p <= '9')) return false;
    while (*p >= '0' && *p <= '9') p++;
    exp = true;
  }
  if (!digits || *p || !(dot || exp)) return false;
  char *end;
  *out = strtod(spell, &end);
  return *end == 0 && isfinite(*out);
}

/* Integers: an optional '-' and decimal digits; numbers (CNN) with a '.'
 * or an exponent. The run of identifier-like characters after it is taken
 * whole so `12abc` or `1.5x` is one bad token. */
static fe_token lex_int(fe_lexer *lx) {
  size_t start = lx->pos, p = start;
  bool neg = lx->text[p] == '-';
  if (neg) p++;
  while (p < lx->len && (is_ident_char(lx->text[p]) || lx->text[p] == '.' ||
                         ((lx->text[p] == '-' || lx->text[p] == '+') && (lx->text[p - 1] == 'e' || lx->text[p - 1] == 'E'))))
    p++;
  const char *spell = arena_strndup(lx->arena, lx->text + start, p - start);
  fe_token t = {.kind = FE_TOK_INT, .text = spell, .loc = loc_at(lx, start)};
  if (strchr(spell, '.') || strchr(spell, 'e') || strchr(spell, 'E')) {
    if (!decimal(spell, &t.dval)) {
      diag_error(lx->d, t.loc, "invalid number '%s'", spell);
      return error_token(lx, start);
    }
    t.kind = FE_TOK_FLOAT;
    lx->pos = p;
    return t;
  }
  uint64_t v = 0;
  for (size_t i = start + neg; i < p; i++) {
    char c = lx->text[i];
    if (!is_digit(c)) {
      diag_error(lx->d, t.loc, "invalid integer '%s'", spell);
      return error_token(lx, start);
    }
    unsigned dg = (unsigned)(c - '0');
    if (v > (UINT64_MAX - dg) / 10 || v * 10 + dg > (uint64_t)INT64_MAX + neg) {
      diag_error(lx->d, t.loc, "integer '%s' does not fit in 64 bits", spell);
      return error_token(lx, start);
    }
    v = v * 10 + dg;
  }
  t.ival = neg ? (int64_t)(0 - v) : (int64_t)v;
  t.dval = (double)t.ival;
  lx->pos = p;
  return t;
}

static fe_token lex_string(fe_lexer *lx) {
  size_t start = lx->pos;
  diag_loc loc = loc_at(lx, start);
  str_buf b;
  str_buf_init(&b);
  size_t p = start + 1;
  for (;;) {
    if (p >= lx->len || lx->text[p] == '\n' || lx->text[p] == '\r') {
      diag_error(lx->d, loc, "unterminated string");
      str_buf_fini(&b);
      return error_token(lx, start);
    }
    char c = lx->text[p];
    if (c == '"') break;
    if (c == '\\') {
      char e = p + 1 < lx->len ? lx->text[p + 1] : 0;
      if (e != '"' && e != '\\') {
        if (e == '\n' || e == '\r' || e == 0) {
          diag_error(lx->d, loc, "unterminated string");
        } else {
          diag_error(lx->d, loc_at(lx, p), "unknown escape sequence in string; only \\\" and "
                                           "\\\\ are allowed");
        }
        str_buf_fini(&b);
        return error_token(lx, start);
      }
      str_buf_putc(&b, e);
      p += 2;
      continue;
    }
    if ((unsigned char)c < 0x20 && c != '\t') {
      diag_error(lx->d, loc_at(lx, p), "control character 0x%02x in string", (unsigned char)c);
      str_buf_fini(&b);
      return error_token(lx, start);
    }
    size_t n;
    if (!check_utf8(lx, p, &n)) {
      str_buf_fini(&b);
      return error_token(lx, p);
    }
    str_buf_append(&b, lx->text + p, n);
    p += n;
  }
  fe_token t = {.kind = FE_TOK_STRING, .loc = loc};
  t.text = arena_strdup(lx->arena, str_buf_cstr(&b));
  str_buf_fini(&b);
  lx->pos = p + 1;
  return t;
}

fe_token fe_lexer_next(fe_lexer *lx) {
  while (lx->pos < lx->len) {
    char c = lx->text[lx->pos];
    if (c == ' ' || c == '\t' || c == '\r') {
      lx->pos++;
      continue;
    }
    size_t start = lx->pos;
    fe_token t = {.loc = loc_at(lx, start)};
    if (c == '\n') {
      t.kind = FE_TOK_NEWLINE;
      lx->pos++;
      lx->line++;
      lx->line_start = lx->pos;
      return t;
    }
    if (c == '#') return lex_comment(lx);
    if (is_ident_start(c)) {
      size_t p = start;
      while (p < lx->len && is_ident_char(lx->text[p])) p++;
      t.kind = FE_TOK_IDENT;
      t.text = arena_strndup(lx->arena, lx->text + start, p - start);
      lx->pos = p;
      return t;
    }
    if (is_digit(c) || (c == '-' && start + 1 < lx->len && is_digit(lx->text[start + 1])))
      return lex_int(lx);
    if (c == '"') return lex_string(lx);
    static const char punct[] = "()[],=";
    static const fe_tok_kind punct_kind[] = {FE_TOK_LPAREN,   FE_TOK_RPAREN, FE_TOK_LBRACKET,
                                             FE_TOK_RBRACKET, FE_TOK_COMMA,  FE_TOK_EQ};
    const char *pc = c ? strchr(punct, c) : NULL;
    if (pc) {
      t.kind = punct_kind[pc - punct];
      lx->pos++;
      return t;
    }
    size_t n;
    if (!check_utf8(lx, start, &n)) return error_token(lx, start);
    if (n > 1)
      diag_error(lx->d, t.loc, "unexpected character '%.*s'", (int)n, lx->text + start);
    else if (c > 0x20 && c < 0x7f)
      diag_error(lx->d, t.loc, "unexpected character '%c'", c);
    else
      diag_error(lx->d, t.loc, "unexpected byte 0x%02x", (unsigned char)c);
    return error_token(lx, start);
  }
  return (fe_token){.kind = FE_TOK_EOF, .loc = loc_at(lx, lx->len)};
}
