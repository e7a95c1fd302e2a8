/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxemu_parse.c: PTX text to decoded kernels (ptxemu_internal.h).
 *
 * Accepts the subset of PTX that castor's kernels use (the module
 * directives .version/.target/.address_size, the dynamic shared array
 * `.extern .shared .align N .b8 NAME[]`, `.entry` kernels with .param
 * .u64/.u32/... parameters, .reg declarations (ranges %r<N> and single
 * registers such as LLVM's stack pointers %SP, %SPL), a kernel's .local
 * arrays (LLVM's `__local_depotN` frame, see PE_LOCAL_BASE), labels, and
 * the instructions of pe_op) and refuses everything else with its line:
 * an emulator that skipped an instruction it does not know would prove
 * nothing. Every modifier of an instruction is checked against the ones
 * that instruction may take.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptxemu_internal.h"

typedef struct parser {
  const char *s;
  size_t i, n;
  int line;
  char *err;
  size_t errlen;
  bool failed;
  char smem_name[128]; /* the dynamic shared array */
  /* the current kernel's .local arrays: their offsets in its local frame */
  struct localsym { char name[128]; int offset; } locals[16];
  int n_locals;
  /* the current kernel's register classes */
  /* named: a scoped scratch register without '%' ({ .reg .b32 tmp; ... }, LLVM's
   * way to take half of a b64), one register, reused by every block that names it */
  struct regclass { char prefix[16]; int count, base, bytes; bool is_pred, named; } rc[32];
  int n_rc, n_regs;
  char **labels;
  int *label_at, n_labels, cap_labels;
  char **pending_label; /* branch targets, resolved at the end of the kernel */
  int *pending_insn, n_pending, cap_pending;
} parser;

static bool fail(parser *p, int line, const char *fmt, ...) {
  if (p->failed) return false;
  p->failed = true;
  int k = snprintf(p->err, p->errlen, "ptxemu: line %d: ", line);
  va_list ap;
  va_start(ap, fmt);
  if (k >= 0 && (size_t)k < p->errlen) vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return false;
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

static void *grow(void *v, int *cap, int need, size_t elem) {
  if (need <= *cap) return v;
  int c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  *cap = c;
  return realloc(v, (size_t)c * elem);
}

/* ---- lexing over the comment-free text ---- */

static void skip_ws(parser *p) {
  while (p->i < p->n) {
    char c = p->s[p->i];
    if (c == '\n') p->line++, p->i++;
    else if (isspace((unsigned char)c)) p->i++;
    else if (c == '/' && p->i + 1 < p->n && p->s[p->i + 1] == '/') {
      while (p->i < p->n && p->s[p->i] != '\n') p->i++;
    } else if (c == '/' && p->i + 1 < p->n && p->s[p->i + 1] == '*') {
      p->i += 2;
      while (p->i + 1 < p->n && !(p->s[p->i] == '*' && p->s[p->i + 1] == '/')) {
        if (p->s[p->i] == '\n') p->line++;
        p->i++;
      }
      p->i += 2;
    } else break;
  }
}

static bool is_ident(char c) { return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '.' || c == '%'; }

/* A word of identifier characters (dots included). */
static size_t word(parser *p, char *out, size_t cap) {
  skip_ws(p);
  size_t k = 0;
  while (p->i < p->n && is_ident(p->s[p->i])) {
    if (k + 1 < cap) out[k++] = p->s[p->i];
    p->i++;
  }
  out[k] = 0;
  return k;
}

static bool expect(parser *p, char c) {
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == c) {
    p->i++;
    return true;
  }
  return fail(p, p->line, "expected '%c'", c);
}

/* The statement up to ';' (comments removed, newlines counted). */
static char *statement(parser *p) {
  size_t start = p->i;
  char *buf = malloc(p->n - start + 1);
  size_t k = 0;
  while (p->i < p->n && p->s[p->i] != ';') {
    char c = p->s[p->i];
    if (c == '/' && p->i + 1 < p->n && (p->s[p->i + 1] == '/' || p->s[p->i + 1] == '*')) {
      skip_ws(p);
      buf[k++] = ' ';
      continue;
    }
    if (c == '\n') p->line++;
    buf[k++] = c;
    p->i++;
  }
  buf[k] = 0;
  if (p->i >= p->n) {
    free(buf);
    fail(p, p->line, "missing ';'");
    return NULL;
  }
  p->i++;
  return buf;
}

/* ---- types and modifiers ---- */

static const struct { const char *name; pe_ty ty; } types[] = {
    {"pred", T_PRED}, {"b8", T_B8},   {"b16", T_B16}, {"b32", T_B32}, {"b64", T_B64}, {"u8", T_U8},
    {"u16", T_U16},   {"u32", T_U32}, {"u64", T_U64}, {"s8", T_S8},   {"s16", T_S16}, {"s32", T_S32},
    {"s64", T_S64},   {"f16", T_F16}, {"bf16", T_BF16}, {"f32", T_F32}, {"f64", T_F64},
};

static pe_ty type_of(const char *s) {
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (!strcmp(s, types[i].name)) return types[i].ty;
  return T_NONE;
}

int pe_ty_bytes(pe_ty t) {
  switch (t) {
  case T_PRED: return 1;
  case T_B8: case T_U8: case T_S8: return 1;
  case T_B16: case T_U16: case T_S16: case T_F16: case T_BF16: return 2;
  case T_B32: case T_U32: case T_S32: case T_F32: return 4;
  case T_B64: case T_U64: case T_S64: case T_F64: return 8;
  case T_NONE: break;
  }
  return 0;
}

static const char *const cmp_names[] = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi",
                                        "hs", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"};
static const char *const rnd_names[] = {"", "rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi"};

/* The modifiers after the opcode's base name, classified. */
typedef struct mods {
  pe_ty ty[4];
  int n_ty;
  int rnd, cmp, space, mul, vec, shfl, num;
  bool ftz, sat, approx, trans, sync, aligned, uni, full;
  char other[8][32]; /* op-specific words, in order */
  int n_other;
} mods;

static bool split_mods(parser *p, int line, const char *opc, char *base, mods *m) {
  memset(m, 0, sizeof *m);
  m->rnd = R_NONE, m->cmp = -1, m->space = S_NONE, m->mul = M_NONE, m->vec = 1, m->shfl = -1;
  const char *dot = strchr(opc, '.');
  size_t bl = dot ? (size_t)(dot - opc) : strlen(opc);
  if (bl >= 32) return fail(p, line, "unsupported instruction '%s'", opc);
  memcpy(base, opc, bl), base[bl] = 0;
  while (dot) {
    const char *next = strchr(dot + 1, '.');
    size_t len = next ? (size_t)(next - dot - 1) : strlen(dot + 1);
    char w[32];
    if (len == 0 || len >= sizeof w) return fail(p, line, "unsupported instruction '%s'", opc);
    memcpy(w, dot + 1, len), w[len] = 0;
    dot = next;
    pe_ty t = type_of(w);
    if (t != T_NONE) {
      if (m->n_ty == 4) return fail(p, line, "unsupported instruction '%s'", opc);
      m->ty[m->n_ty++] = t;
      continue;
    }
    bool done = false;
    for (int i = 1; i < (int)(sizeof rnd_names / sizeof rnd_names[0]) && !done; i++)
      if (!strcmp(w, rnd_names[i])) m->rnd = i, done = true;
    /* lo/hi are both comparisons (setp) and mul modes: decode() maps them */
    for (int i = 0; i < (int)(sizeof cmp_names / sizeof cmp_names[0]) && !done; i++)
      if (i != C_LO && i != C_HI && !strcmp(w, cmp_names[i]) && m->cmp < 0) m->cmp = i, done = true;
    if (done) continue;
    if (!strcmp(w, "ftz")) m->ftz = true;
    else if (!strcmp(w, "sat")) m->sat = true;
    else if (!strcmp(w, "approx")) m->approx = true;
    else if (!strcmp(w, "full")) m->full = true;
    else if (!strcmp(w, "trans")) m->trans = true;
    else if (!strcmp(w, "sync")) m->sync = true;
    else if (!strcmp(w, "aligned")) m->aligned = true;
    else if (!strcmp(w, "uni")) m->uni = true;
    else if (!strcmp(w, "global")) m->space = m->space == S_NONE ? S_GLOBAL : -1;
    else if (!strcmp(w, "shared")) m->space = m->space == S_NONE ? S_SHARED : -1;
    else if (!strcmp(w, "param")) m->space = m->space == S_NONE ? S_PARAM : -1;
    else if (!strcmp(w, "local")) m->space = m->space == S_NONE ? S_LOCAL : -1;
    else if (!strcmp(w, "to")) m->num = -1; /* cvta.to */
    else if (!strcmp(w, "v2")) m->vec = 2;
    else if (!strcmp(w, "v4")) m->vec = 4;
    else if (!strcmp(w, "lo")) m->mul = M_LO;
    else if (!strcmp(w, "hi")) m->mul = M_HI;
    else if (!strcmp(w, "wide")) m->mul = M_WIDE;
    else if (!strcmp(w, "bfly")) m->shfl = SH_BFLY;
    else if (!strcmp(w, "up")) m->shfl = SH_UP;
    else if (!strcmp(w, "down")) m->shfl = SH_DOWN;
    else if (!strcmp(w, "idx")) m->shfl = SH_IDX;
    else {
      if (m->n_other == 8) return fail(p, line, "unsupported instruction '%s'", opc);
      snprintf(m->other[m->n_other++], sizeof m->other[0], "%s", w);
    }
  }
  return true;
}

/* ---- operands ---- */

static int reg_index(parser *p, const char *name, int line) {
  /* %<letters><digits>, or a register declared alone (%SP, or a scoped
   * scratch register without '%') by its name */
  for (int i = 0; i < p->n_rc; i++)
    if (p->rc[i].named && !strcmp(p->rc[i].prefix, name)) return p->rc[i].base;
  if (name[0] != '%') return fail(p, line, "expected a register, got '%s'", name), -1;
  size_t k = 1;
  while (isalpha((unsigned char)name[k])) k++;
  if (!isdigit((unsigned char)name[k])) return fail(p, line, "unknown register '%s'", name), -1;
  char *end;
  long num = strtol(name + k, &end, 10);
  if (*end) return fail(p, line, "unknown register '%s'", name), -1;
  for (int i = 0; i < p->n_rc; i++)
    if (strlen(p->rc[i].prefix) == k - 1 && !strncmp(p->rc[i].prefix, name + 1, k - 1)) {
      if (num < 0 || num >= p->rc[i].count) break;
      return p->rc[i].base + (int)num;
    }
  return fail(p, line, "undeclared register '%s'", name), -1;
}

static bool parse_imm(const char *s, int64_t *out) {
  char *end;
  if ((s[0] == '0' && (s[1] == 'f' || s[1] == 'F')) && strlen(s) == 10) {
    *out = (int64_t)strtoull(s + 2, &end, 16);
    return *end == 0;
  }
  if ((s[0] == '0' && (s[1] == 'd' || s[1] == 'D')) && strlen(s) == 18) {
    *out = (int64_t)strtoull(s + 2, &end, 16);
    return *end == 0;
  }
  if (s[0] == '-' || isdigit((unsigned char)s[0])) {
    if (s[0] == '-') *out = strtoll(s, &end, 0);
    else *out = (int64_t)strtoull(s, &end, 0);
    if (*end == 'U' || *end == 'u') end++;
    return *end == 0 && end != s;
  }
  return false;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
  return s;
}

static const char *const sreg_names[] = {"%tid.x",   "%tid.y",   "%tid.z",    "%ntid.x",   "%ntid.y",
                                         "%ntid.z",  "%ctaid.x", "%ctaid.y",  "%ctaid.z",  "%nctaid.x",
                                         "%nctaid.y", "%nctaid.z", "%laneid", "%warpid"};

/* The declared width in bytes of register r (an index of reg_index). */
static int reg_bytes(const parser *p, int r) {
  for (int i = 0; i < p->n_rc; i++)
    if (r >= p->rc[i].base && r < p->rc[i].base + p->rc[i].count) return p->rc[i].bytes;
  return 0;
}

/* The offset of the current kernel's .local array `name` in its frame, or -1. */
static int local_offset(const parser *p, const char *name) {
  for (int i = 0; i < p->n_locals; i++)
    if (!strcmp(p->locals[i].name, name)) return p->locals[i].offset;
  return -1;
}

static bool parse_opnd(parser *p, const pe_kernel *k, char *s, int line, pe_opnd *o) {
  s = trim(s);
  memset(o, 0, sizeof *o);
  o->r[0] = -1;
  if (!*s) return fail(p, line, "empty operand");
  if (s[0] == '{') { /* vector of registers */
    char *close = strchr(s, '}');
    if (!close || close[1]) return fail(p, line, "malformed vector operand '%s'", s);
    *close = 0;
    o->kind = K_VEC;
    char *save = NULL;
    for (char *t = strtok_r(s + 1, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      if (o->n == 4) return fail(p, line, "vector operand of more than 4 registers");
      int r = reg_index(p, trim(t), line);
      if (r < 0) return false;
      o->r[o->n++] = r;
    }
    return o->n > 0 || fail(p, line, "empty vector operand");
  }
  if (s[0] == '[') { /* [reg], [reg+imm], [sym], [sym+imm], [param] */
    size_t n = strlen(s);
    if (s[n - 1] != ']') return fail(p, line, "malformed address '%s'", s);
    s[n - 1] = 0;
    char *a = trim(s + 1), *plus = strchr(a, '+');
    int64_t off = 0;
    if (plus) {
      *plus = 0;
      if (!parse_imm(trim(plus + 1), &off)) return fail(p, line, "malformed address offset '%s'", plus + 1);
      a = trim(a);
    }
    o->kind = K_MEM, o->imm = off;
    if (a[0] == '%') {
      o->r[0] = reg_index(p, a, line);
      return o->r[0] >= 0;
    }
    for (int i = 0; i < k->n_params; i++)
      if (!strcmp(a, k->param_names[i])) {
        o->n = 1, o->imm += k->param_offset[i];
        return true;
      }
    if (p->smem_name[0] && !strcmp(a, p->smem_name)) return true; /* offset 0 of shared */
    int lo = local_offset(p, a);
    if (lo >= 0) {
      o->imm += PE_LOCAL_BASE + lo;
      return true;
    }
    return fail(p, line, "unknown address '%s'", a);
  }
  if (s[0] == '%') {
    for (int i = 0; i < (int)(sizeof sreg_names / sizeof sreg_names[0]); i++)
      if (!strcmp(s, sreg_names[i])) {
        o->kind = K_SREG, o->imm = i;
        return true;
      }
    if (strchr(s, '.')) return fail(p, line, "unsupported special register '%s'", s);
    o->kind = K_REG;
    o->r[0] = reg_index(p, s, line);
    return o->r[0] >= 0;
  }
  if (s[0] == '$' || isalpha((unsigned char)s[0]) || s[0] == '_') {
    if (p->smem_name[0] && !strcmp(s, p->smem_name)) {
      o->kind = K_SYM, o->imm = 0;
      return true;
    }
    int lo = local_offset(p, s);
    if (lo >= 0) { /* mov.u64 %SPL, __local_depot0: the frame's local address */
      o->kind = K_SYM, o->imm = PE_LOCAL_BASE + lo;
      return true;
    }
    o->kind = K_LABEL, o->imm = -1;
    return true; /* resolved by the caller */
  }
  if (parse_imm(s, &o->imm)) {
    o->kind = K_IMM;
    return true;
  }
  return fail(p, line, "unsupported operand '%s'", s);
}

/* Splits the operand list at top-level commas. */
static int split_operands(char *s, char **out, int max) {
  int n = 0, depth = 0;
  char *start = s;
  for (char *c = s;; c++) {
    if (*c == '{' || *c == '[') depth++;
    else if (*c == '}' || *c == ']') depth--;
    if ((*c == ',' && depth == 0) || *c == 0) {
      bool end = *c == 0;
      *c = 0;
      if (n < max) out[n] = start;
      n++;
      start = c + 1;
      if (end) break;
    }
  }
  if (n == 1 && !*trim(out[0])) return 0;
  return n;
}

/* ---- instructions ---- */

static bool is_int(pe_ty t) { return t >= T_B8 && t <= T_S64; }

#define BAD() return fail(p, line, "unsupported instruction '%s'", opc)

static bool decode(parser *p, pe_kernel *k, pe_insn *in, char *opc, char *args, int line) {
  char base[32];
  mods m;
  if (!split_mods(p, line, opc, base, &m)) return false;
  in->ty = m.n_ty > 0 ? m.ty[0] : T_NONE;
  in->ty2 = m.n_ty > 1 ? m.ty[1] : T_NONE;
  in->rnd = (uint8_t)m.rnd, in->ftz = m.ftz, in->sat = m.sat, in->approx = m.approx, in->trans = m.trans;
  in->vec = (uint8_t)m.vec, in->mul = (uint8_t)m.mul;
  in->space = m.space < 0 ? S_NONE : (uint8_t)m.space;
  char *ops[6];
  int n = split_operands(args, ops, 6);
  if (n > 5) return fail(p, line, "too many operands for '%s'", opc);
  in->n_ops = (int8_t)n;
  for (int i = 0; i < n; i++)
    if (!parse_opnd(p, k, ops[i], line, &in->o[i])) return false;
  bool plain = !m.n_other && !m.sync && !m.aligned && !m.uni && !m.trans && !m.full && m.shfl < 0 && m.num == 0;
  int want = -1;
  if (!strcmp(base, "mov")) {
    in->op = OP_MOV, want = 2;
    if (!plain || m.n_ty != 1 || m.rnd || m.cmp >= 0 || m.space || m.mul || m.vec != 1 || m.ftz || m.sat) BAD();
    /* mov.b64 {lo, hi}, %rd (unpack) or mov.b64 %rd, {lo, hi} (pack): 32-bit halves; mov.b32 the
     * same with 16-bit halves (LLVM's { .reg .b16 tmp; mov.b32 {tmp, %rs8}, %r103; }) */
    bool vd = n > 0 && in->o[0].kind == K_VEC, vs = n > 1 && in->o[1].kind == K_VEC;
    if ((vd || vs) && (vd == vs || (in->ty != T_B64 && in->ty != T_B32) || in->o[vd ? 0 : 1].n != 2 ||
                       in->o[vd ? 1 : 0].kind != K_REG))
      BAD();
    if (vd || vs) { /* the whole register and the halves of their declared widths */
      const pe_opnd *v = &in->o[vd ? 0 : 1];
      int wb = pe_ty_bytes(in->ty);
      if (reg_bytes(p, in->o[vd ? 1 : 0].r[0]) != wb || reg_bytes(p, v->r[0]) != wb / 2 || reg_bytes(p, v->r[1]) != wb / 2)
        BAD();
    }
  } else if (!strcmp(base, "ld") || !strcmp(base, "st")) {
    in->op = base[0] == 'l' ? OP_LD : OP_ST, want = 2;
    if (!plain || m.n_ty != 1 || m.rnd || m.cmp >= 0 || m.mul || m.ftz || m.sat || m.approx) BAD();
    /* no space: a generic address (global, or local through cvta.local) */
    if (m.space != S_NONE && m.space != S_GLOBAL && m.space != S_SHARED && m.space != S_LOCAL &&
        !(m.space == S_PARAM && in->op == OP_LD))
      BAD();
    if (m.vec > 1 && in->o[in->op == OP_LD ? 0 : 1].kind != K_VEC) return fail(p, line, "%s needs a vector operand", opc);
  } else if (!strcmp(base, "cvta")) {
    in->op = OP_CVTA, want = 2;
    /* cvta.to.global, and local <-> generic (cvta.local, cvta.to.local): the generic address is the
     * global or local one itself (their windows do not overlap); shared has no generic window here */
    if (m.n_other || (m.num != -1 && m.num != 0) || (m.space != S_GLOBAL && m.space != S_LOCAL) || m.n_ty != 1 ||
        in->ty != T_U64 || (m.space == S_GLOBAL && m.num != -1))
      BAD();
  } else if (!strcmp(base, "cvt")) {
    in->op = OP_CVT, want = 2;
    if (!plain || m.n_ty != 2 || m.cmp >= 0 || m.space || m.mul || m.vec != 1 || m.approx) BAD();
    bool fd = is_float(in->ty), fs = is_float(in->ty2);
    /* float -> float narrowing and int <-> float need a rounding; PTX requires it */
    if (fd && fs && pe_ty_bytes(in->ty) < pe_ty_bytes(in->ty2) && m.rnd != R_RN && m.rnd != R_RZ && m.rnd != R_RM &&
        m.rnd != R_RP)
      BAD();
    if (fd && !fs && (m.rnd < R_RN || m.rnd > R_RP)) BAD();
    if (!fd && fs && (m.rnd < R_RNI)) BAD();
    if (!fd && !fs && m.rnd) BAD();
    if (in->ty == T_PRED || in->ty2 == T_PRED) BAD();
    if ((in->ty == T_F16 || in->ty == T_BF16) && fs && m.rnd != R_RN && pe_ty_bytes(in->ty2) > 2) BAD(); /* only .rn */
  } else if (!strcmp(base, "add") || !strcmp(base, "sub") || !strcmp(base, "mul") || !strcmp(base, "mad") ||
             !strcmp(base, "fma") || !strcmp(base, "div") || !strcmp(base, "rem") || !strcmp(base, "min") ||
             !strcmp(base, "max")) {
    static const struct { const char *n; pe_op op; int ops; } ar[] = {
        {"add", OP_ADD, 3}, {"sub", OP_SUB, 3}, {"mul", OP_MUL, 3}, {"mad", OP_MAD, 4}, {"fma", OP_FMA, 4},
        {"div", OP_DIV, 3}, {"rem", OP_REM, 3}, {"min", OP_MIN, 3}, {"max", OP_MAX, 3}};
    for (size_t i = 0; i < sizeof ar / sizeof ar[0]; i++)
      if (!strcmp(base, ar[i].n)) in->op = ar[i].op, want = ar[i].ops;
    if (!plain || m.n_ty != 1 || m.cmp >= 0 || m.space || m.vec != 1) BAD();
    if (in->ty == T_PRED || in->ty == T_BF16 || in->ty == T_B8 || in->ty == T_U8 || in->ty == T_S8) BAD();
    /* f64: the training step's double sums (the losses' mean, bn_mean), round-to-nearest only */
    if (in->ty == T_F64 && (m.rnd != R_RN || m.ftz || m.sat || m.approx || m.full) && in->op != OP_MIN && in->op != OP_MAX) BAD();
    if (in->ty == T_F64 && (in->op == OP_MIN || in->op == OP_MAX) && (m.ftz || m.sat)) BAD();
    if (is_float(in->ty)) {
      if (m.mul) BAD();
      if (in->op == OP_REM) BAD();
      if (in->op == OP_FMA || in->op == OP_MAD) { if (m.rnd < R_RN || m.rnd > R_RP) BAD(); }
      else if (in->op == OP_DIV) { if (!(m.rnd >= R_RN && m.rnd <= R_RP) && !(m.approx || m.full)) BAD(); }
      else if (in->op == OP_MIN || in->op == OP_MAX) { if (m.rnd || m.approx) BAD(); }
      else if (m.rnd > R_RP || m.approx) BAD();
      if (in->ty == T_F16 && (in->op == OP_DIV || m.sat)) BAD();
    } else {
      if (m.rnd || m.ftz || m.approx || m.full) BAD();
      if (in->op == OP_FMA) BAD();
      if ((in->op == OP_MUL || in->op == OP_MAD) ? m.mul == M_NONE : m.mul != M_NONE) BAD();
      if (m.sat && !(in->ty == T_S32 && (in->op == OP_ADD || in->op == OP_SUB))) BAD();
      if (m.mul == M_WIDE && pe_ty_bytes(in->ty) > 4) BAD();
    }
  } else if (!strcmp(base, "neg") || !strcmp(base, "abs") || !strcmp(base, "not") || !strcmp(base, "rcp") ||
             !strcmp(base, "sqrt") || !strcmp(base, "rsqrt") || !strcmp(base, "ex2") || !strcmp(base, "lg2") ||
             !strcmp(base, "sin") || !strcmp(base, "cos") || !strcmp(base, "tanh")) {
    static const struct { const char *n; pe_op op; } un[] = {
        {"neg", OP_NEG}, {"abs", OP_ABS}, {"not", OP_NOT}, {"rcp", OP_RCP}, {"sqrt", OP_SQRT}, {"rsqrt", OP_RSQRT},
        {"ex2", OP_EX2}, {"lg2", OP_LG2}, {"sin", OP_SIN}, {"cos", OP_COS}, {"tanh", OP_TANH}};
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
      if (!strcmp(base, un[i].n)) in->op = un[i].op;
    want = 2;
    if (!plain || m.n_ty != 1 || m.cmp >= 0 || m.space || m.mul || m.vec != 1 || m.sat) BAD();
    if (in->op == OP_NEG || in->op == OP_ABS) {
      if (m.rnd || m.approx || in->ty == T_PRED || pe_ty_bytes(in->ty) < 2 || in->ty == T_BF16) BAD();
    } else if (in->op == OP_NOT) {
      if (m.rnd || m.approx || m.ftz || (!is_int(in->ty) && in->ty != T_PRED)) BAD();
    } else {
      if (in->ty != T_F32 && !(in->ty == T_F64 && (in->op == OP_RCP || in->op == OP_SQRT) && m.rnd == R_RN && !m.ftz)) BAD();
      bool exact_ok = in->op == OP_RCP || in->op == OP_SQRT;
      if (m.approx ? m.rnd != R_NONE : !(exact_ok && m.rnd >= R_RN && m.rnd <= R_RP)) BAD();
    }
  } else if (!strcmp(base, "and") || !strcmp(base, "or") || !strcmp(base, "xor") || !strcmp(base, "shl") ||
             !strcmp(base, "shr")) {
    in->op = base[0] == 'a' ? OP_AND : base[0] == 'o' ? OP_OR : base[0] == 'x' ? OP_XOR : base[2] == 'l' ? OP_SHL : OP_SHR;
    want = 3;
    if (!plain || m.n_ty != 1 || m.rnd || m.cmp >= 0 || m.space || m.mul || m.vec != 1 || m.ftz || m.sat || m.approx) BAD();
    if (!is_int(in->ty) && !(in->ty == T_PRED && in->op <= OP_XOR)) BAD();
    if (in->op == OP_SHL && in->ty != T_B16 && in->ty != T_B32 && in->ty != T_B64) BAD();
  } else if (!strcmp(base, "bfe")) {
    in->op = OP_BFE, want = 4;
    if (!plain || m.n_ty != 1 || m.rnd || m.cmp >= 0 || m.space || m.mul || m.vec != 1) BAD();
    if (in->ty != T_U32 && in->ty != T_S32 && in->ty != T_U64 && in->ty != T_S64) BAD();
  } else if (!strcmp(base, "selp")) {
    in->op = OP_SELP, want = 4;
    if (!plain || m.n_ty != 1 || m.rnd || m.cmp >= 0 || m.space || m.mul || m.vec != 1 || in->ty == T_PRED) BAD();
  } else if (!strcmp(base, "setp")) {
    in->op = OP_SETP, want = 3;
    if (m.cmp < 0 && m.mul == M_LO) m.cmp = C_LO, m.mul = M_NONE;
    if (m.cmp < 0 && m.mul == M_HI) m.cmp = C_HI, m.mul = M_NONE;
    if (!plain || m.n_ty != 1 || m.cmp < 0 || m.rnd || m.space || m.mul || m.vec != 1 || m.sat || m.approx) BAD();
    in->cmp = (uint8_t)m.cmp;
    bool f = is_float(in->ty);
    if (!f && m.cmp >= C_EQU) BAD();
    if (f && m.cmp >= C_LO && m.cmp <= C_HS) BAD();
    if (in->ty == T_PRED || in->ty == T_BF16 || pe_ty_bytes(in->ty) < 2) BAD();
  } else if (!strcmp(base, "bra")) {
    in->op = OP_BRA, want = 1;
    if (m.n_other || m.n_ty || m.sync || m.aligned || m.rnd || m.cmp >= 0) BAD();
    if (in->o[0].kind != K_LABEL) return fail(p, line, "bra needs a label");
  } else if (!strcmp(base, "ret") || !strcmp(base, "exit")) {
    in->op = OP_RET, want = 0;
    if (opc[strlen(base)]) BAD();
  } else if (!strcmp(base, "bar") || !strcmp(base, "barrier")) {
    in->op = OP_BAR, want = 1;
    /* bar.sync a == barrier.sync.aligned a: all threads of the CTA */
    if (m.n_other || m.n_ty || !m.sync || m.uni || m.rnd || (base[0] == 'b' && base[1] == 'a' && base[3] == 0 && m.aligned)) BAD();
    if (in->o[0].kind != K_IMM || in->o[0].imm != 0)
      return fail(p, line, "%s: only barrier 0 without a thread count is implemented", opc);
  } else if (!strcmp(base, "shfl")) {
    in->op = OP_SHFL, want = 5;
    if (m.n_other || !m.sync || m.shfl < 0 || m.n_ty != 1 || in->ty != T_B32 || m.rnd || m.cmp >= 0 || m.space) BAD();
    in->shfl = (uint8_t)m.shfl;
    if (n == 6) BAD(); /* the |p predicate output form */
  } else if (!strcmp(base, "ldmatrix")) {
    in->op = OP_LDMATRIX, want = 2;
    if (!m.sync || !m.aligned || m.space != S_SHARED || m.n_ty != 1 || in->ty != T_B16 || m.n_other != 2 ||
        strcmp(m.other[0], "m8n8"))
      BAD();
    if (!strcmp(m.other[1], "x1")) in->vec = 1;
    else if (!strcmp(m.other[1], "x2")) in->vec = 2;
    else if (!strcmp(m.other[1], "x4")) in->vec = 4;
    else BAD();
    if (in->o[0].kind != K_VEC || in->o[0].n != in->vec || in->o[1].kind != K_MEM)
      return fail(p, line, "%s needs {%d registers} and an address", opc, in->vec);
  } else if (!strcmp(base, "mma")) {
    in->op = OP_MMA, want = 4;
    if (!m.sync || !m.aligned || m.n_other != 3 || strcmp(m.other[0], "m16n8k16") || strcmp(m.other[1], "row") ||
        strcmp(m.other[2], "col") || m.n_ty != 4 || m.ty[0] != T_F32 || m.ty[3] != T_F32 || m.ty[1] != m.ty[2] ||
        (m.ty[1] != T_F16 && m.ty[1] != T_BF16) || m.rnd || m.space || m.sat || m.ftz)
      BAD();
    in->ty = T_F32, in->ty2 = m.ty[1];
    int sizes[4] = {4, 4, 2, 4};
    for (int i = 0; i < 4 && i < n; i++)
      if (in->o[i].kind != K_VEC || in->o[i].n != sizes[i]) return fail(p, line, "%s: operand %d must be a vector of %d registers", opc, i + 1, sizes[i]);
  } else if (!strcmp(base, "cp")) {
    if (m.n_other < 1 || strcmp(m.other[0], "async")) BAD();
    if (m.n_other == 2 && !strcmp(m.other[1], "commit_group") && !m.n_ty && !m.space) {
      in->op = OP_CP_COMMIT, want = 0;
    } else if (m.n_other == 2 && !strcmp(m.other[1], "wait_group") && !m.n_ty && !m.space) {
      in->op = OP_CP_WAIT, want = 1;
      if (in->o[0].kind != K_IMM || in->o[0].imm < 0) return fail(p, line, "%s needs an immediate count", opc);
    } else if (m.n_other == 2 && !strcmp(m.other[1], "wait_all") && !m.n_ty && !m.space) {
      in->op = OP_CP_WAIT, want = 0, in->o[0].kind = K_IMM, in->o[0].imm = 0;
    } else if (m.n_other == 2 && (!strcmp(m.other[1], "cg") || !strcmp(m.other[1], "ca")) && m.space == -1 && !m.n_ty) {
      /* cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size} */
      in->op = OP_CP_ASYNC;
      if (n != 3 && n != 4) return fail(p, line, "%s takes 3 or 4 operands", opc);
      want = n;
      if (in->o[0].kind != K_MEM || in->o[1].kind != K_MEM || in->o[2].kind != K_IMM) BAD();
      int64_t sz = in->o[2].imm;
      if (!(sz == 16 || (m.other[1][1] == 'a' && (sz == 4 || sz == 8)))) return fail(p, line, "%s: cp-size %lld", opc, (long long)sz);
    } else BAD();
  } else {
    BAD();
  }
  if (want >= 0 && n != want) return fail(p, line, "'%s' takes %d operand%s, got %d", opc, want, want == 1 ? "" : "s", n);
  return true;
}

/* ---- kernels ---- */

static bool parse_params(parser *p, pe_kernel *k) {
  if (!expect(p, '(')) return false;
  int cap = 0;
  for (;;) {
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ')') {
      p->i++;
      return true;
    }
    char w[128], t[32], name[128];
    int line = p->line;
    word(p, w, sizeof w);
    if (strcmp(w, ".param")) return fail(p, line, "expected .param, got '%s'", w);
    word(p, t, sizeof t);
    pe_ty ty = t[0] == '.' ? type_of(t + 1) : T_NONE;
    if (ty == T_NONE || ty == T_PRED) return fail(p, line, "unsupported parameter type '%s'", t);
    word(p, name, sizeof name);
    if (!name[0]) return fail(p, line, "expected a parameter name");
    int sz = pe_ty_bytes(ty);
    k->param_names = grow(k->param_names, &cap, k->n_params + 1, sizeof *k->param_names);
    k->param_offset = realloc(k->param_offset, (size_t)cap * sizeof *k->param_offset);
    k->param_size = realloc(k->param_size, (size_t)cap * sizeof *k->param_size);
    int off = (k->param_bytes + sz - 1) / sz * sz;
    k->param_names[k->n_params] = strdup(name);
    k->param_offset[k->n_params] = off;
    k->param_size[k->n_params] = sz;
    k->n_params++;
    k->param_bytes = off + sz;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ',') p->i++;
  }
}

static bool parse_reg_decl(parser *p, char *st, int line) {
  /* .reg .TYPE %name<N>   or   .reg .TYPE %a, %b */
  char *s = trim(st + 4);
  char t[32];
  size_t k = 0;
  while (*s && !isspace((unsigned char)*s) && k + 1 < sizeof t) t[k++] = *s++;
  t[k] = 0;
  pe_ty ty = t[0] == '.' ? type_of(t + 1) : T_NONE;
  if (ty == T_NONE) return fail(p, line, "unsupported register type '%s'", t);
  char *save = NULL;
  for (char *r = strtok_r(s, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
    r = trim(r);
    if (r[0] != '%' && (isalpha((unsigned char)r[0]) || r[0] == '_')) { /* a scoped scratch register */
      size_t len = strlen(r);
      for (size_t q = 0; q < len; q++)
        if (!isalnum((unsigned char)r[q]) && r[q] != '_') return fail(p, line, "malformed .reg '%s'", r);
      if (len >= sizeof p->rc[0].prefix) return fail(p, line, "malformed .reg '%s'", r);
      bool known = false;
      for (int i = 0; i < p->n_rc; i++)
        if (p->rc[i].named && !strcmp(p->rc[i].prefix, r)) /* the block in scope now: its width */
          known = true, p->rc[i].bytes = pe_ty_bytes(ty), p->rc[i].is_pred = ty == T_PRED;
      if (known) continue;
      if (p->n_rc == 32 || p->n_regs + 1 > 1 << 16) return fail(p, line, "malformed .reg '%s'", r);
      struct regclass *c = &p->rc[p->n_rc++];
      memcpy(c->prefix, r, len + 1);
      c->count = 1, c->base = p->n_regs++, c->is_pred = ty == T_PRED, c->named = true, c->bytes = pe_ty_bytes(ty);
      continue;
    }
    if (r[0] != '%') return fail(p, line, "malformed .reg '%s'", r);
    char *lt = strchr(r, '<');
    int count = 1;
    size_t plen;
    if (lt) {
      count = atoi(lt + 1);
      plen = (size_t)(lt - r - 1);
    } else { /* a single register %name (LLVM's %SP, %SPL): a class of one, found by its name */
      size_t len = strlen(r);
      for (size_t q = 1; q < len; q++)
        if (!isalnum((unsigned char)r[q]) && r[q] != '_') return fail(p, line, "malformed .reg '%s'", r);
      if (len < 2 || len >= sizeof p->rc[0].prefix || p->n_rc == 32 || p->n_regs + 1 > 1 << 16)
        return fail(p, line, "malformed .reg '%s'", r);
      for (int i = 0; i < p->n_rc; i++)
        if (p->rc[i].named && !strcmp(p->rc[i].prefix, r)) return fail(p, line, "register '%s' declared twice", r);
      struct regclass *c = &p->rc[p->n_rc++];
      memcpy(c->prefix, r, len + 1);
      c->count = 1, c->base = p->n_regs++, c->is_pred = ty == T_PRED, c->named = true, c->bytes = pe_ty_bytes(ty);
      continue;
    }
    if (count <= 0 || count > 1 << 16 || plen == 0 || plen >= sizeof p->rc[0].prefix || p->n_rc == 32)
      return fail(p, line, "malformed .reg '%s'", r);
    if (p->n_regs + count > 1 << 16) return fail(p, line, "more than 65536 registers in one kernel");
    struct regclass *c = &p->rc[p->n_rc++];
    memcpy(c->prefix, r + 1, plen), c->prefix[plen] = 0;
    c->count = count, c->base = p->n_regs, c->is_pred = ty == T_PRED, c->named = false, c->bytes = pe_ty_bytes(ty);
    p->n_regs += count;
  }
  return true;
}

/* `.local [.align A] .TYPE NAME[N]` inside a kernel: an array of the
 * kernel's local frame, placed after the ones before it at its alignment. */
static bool parse_local_decl(parser *p, pe_kernel *k, char *st, int line) {
  char *s = trim(st + 6), w[64];
  int align = 1;
  if (!strncmp(s, ".align", 6) && isspace((unsigned char)s[6])) {
    char *end;
    long a = strtol(s + 6, &end, 10);
    if (end == s + 6 || a <= 0 || a > 256 || (a & (a - 1))) return fail(p, line, "malformed .local alignment in '.local %s'", s);
    align = (int)a;
    s = trim(end);
  }
  size_t n = 0;
  while (s[n] && !isspace((unsigned char)s[n]) && n + 1 < sizeof w) w[n] = s[n], n++;
  w[n] = 0;
  pe_ty ty = w[0] == '.' ? type_of(w + 1) : T_NONE;
  if (ty == T_NONE || ty == T_PRED) return fail(p, line, "unsupported .local type '%s'", w);
  s = trim(s + n);
  char name[128];
  long count = 0;
  int used = 0;
  if (sscanf(s, "%127[A-Za-z0-9_$][%ld]%n", name, &count, &used) != 2 || s[used] || count <= 0)
    return fail(p, line, "unsupported .local declaration '%s' (only NAME[N] arrays)", s);
  if (local_offset(p, name) >= 0) return fail(p, line, ".local '%s' declared twice", name);
  if (p->n_locals == (int)(sizeof p->locals / sizeof p->locals[0])) return fail(p, line, "too many .local arrays");
  int es = pe_ty_bytes(ty);
  if (align < es) align = es;
  int64_t off = ((int64_t)k->local_bytes + align - 1) / align * align;
  if (count > PE_LOCAL_MAX || off + (int64_t)count * es > PE_LOCAL_MAX)
    return fail(p, line, ".local '%s': more than %d bytes of local memory per thread", name, PE_LOCAL_MAX);
  snprintf(p->locals[p->n_locals].name, sizeof p->locals[0].name, "%s", name);
  p->locals[p->n_locals++].offset = (int)off;
  k->local_bytes = (int)(off + count * es);
  return true;
}

static bool parse_kernel(parser *p, pe_module *mod) {
  char name[256];
  int line = p->line;
  word(p, name, sizeof name);
  if (!name[0]) return fail(p, line, "expected a kernel name");
  mod->kernels = realloc(mod->kernels, (size_t)(mod->n_kernels + 1) * sizeof *mod->kernels);
  pe_kernel *k = &mod->kernels[mod->n_kernels++];
  memset(k, 0, sizeof *k);
  k->name = strdup(name);
  if (!parse_params(p, k)) return false;
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == '.') {
    char w[64];
    word(p, w, sizeof w);
    return fail(p, p->line, "unsupported kernel directive '%s'", w);
  }
  if (!expect(p, '{')) return false;
  p->n_rc = 0, p->n_regs = 0, p->n_labels = 0, p->n_pending = 0, p->n_locals = 0;
  int cap = 0, depth = 0;
  for (;;) {
    skip_ws(p);
    if (p->i >= p->n) return fail(p, p->line, "kernel %s: missing '}'", k->name);
    char c = p->s[p->i];
    if (c == '}') {
      p->i++;
      if (depth-- == 0) break;
      continue;
    }
    if (c == '{') {
      p->i++, depth++;
      continue;
    }
    line = p->line;
    /* a label? */
    size_t j = p->i;
    while (j < p->n && is_ident(p->s[j]) && p->s[j] != '%') j++;
    if (j > p->i && j < p->n && p->s[j] == ':') {
      p->labels = grow(p->labels, &p->cap_labels, p->n_labels + 1, sizeof *p->labels);
      p->label_at = realloc(p->label_at, (size_t)p->cap_labels * sizeof *p->label_at);
      p->labels[p->n_labels] = dup_n(p->s + p->i, j - p->i);
      p->label_at[p->n_labels++] = k->n_insns;
      p->i = j + 1;
      continue;
    }
    char *st = statement(p);
    if (!st) return false;
    char *s = trim(st);
    if (!strncmp(s, ".reg", 4) && isspace((unsigned char)s[4])) {
      bool ok = parse_reg_decl(p, s, line);
      free(st);
      if (!ok) return false;
      continue;
    }
    if (!strncmp(s, ".local", 6) && isspace((unsigned char)s[6])) {
      bool ok = parse_local_decl(p, k, s, line);
      free(st);
      if (!ok) return false;
      continue;
    }
    if (s[0] == '.') {
      fail(p, line, "unsupported directive in a kernel: '%.60s'", s);
      free(st);
      return false;
    }
    k->insns = grow(k->insns, &cap, k->n_insns + 1, sizeof *k->insns);
    pe_insn *in = &k->insns[k->n_insns];
    memset(in, 0, sizeof *in);
    in->guard = -1, in->line = line;
    /* collapse whitespace for the message text */
    char *text = malloc(strlen(s) + 1), *t = text;
    for (const char *q = s; *q; q++) {
      if (isspace((unsigned char)*q)) {
        if (t > text && t[-1] != ' ') *t++ = ' ';
      } else *t++ = *q;
    }
    *t = 0;
    in->text = text;
    if (s[0] == '@') {
      s++;
      if (*s == '!') in->guard_neg = true, s++;
      char g[64];
      size_t gk = 0;
      while (*s && !isspace((unsigned char)*s) && gk + 1 < sizeof g) g[gk++] = *s++;
      g[gk] = 0;
      in->guard = reg_index(p, g, line);
      if (in->guard < 0) {
        free(st), free(text);
        return false;
      }
      s = trim(s);
    }
    char opc[96];
    size_t ok_ = 0;
    while (*s && !isspace((unsigned char)*s) && ok_ + 1 < sizeof opc) opc[ok_++] = *s++;
    opc[ok_] = 0;
    bool ok = decode(p, k, in, opc, s, line);
    free(st);
    if (!ok) {
      free(text);
      return false;
    }
    k->n_insns++;
    for (int i = 0; i < in->n_ops; i++)
      if (in->o[i].kind == K_LABEL) {
        if (in->op != OP_BRA) return fail(p, line, "unsupported operand in '%s'", in->text);
        p->pending_label = grow(p->pending_label, &p->cap_pending, p->n_pending + 1, sizeof *p->pending_label);
        p->pending_insn = realloc(p->pending_insn, (size_t)p->cap_pending * sizeof *p->pending_insn);
        /* the label's text: the operand after the opcode */
        const char *lab = strrchr(text, ' ');
        p->pending_label[p->n_pending] = strdup(lab ? lab + 1 : "");
        p->pending_insn[p->n_pending++] = k->n_insns - 1;
      }
  }
  for (int i = 0; i < p->n_pending; i++) {
    int at = -1;
    for (int l = 0; l < p->n_labels; l++)
      if (!strcmp(p->labels[l], p->pending_label[i])) at = p->label_at[l];
    if (at < 0) return fail(p, k->insns[p->pending_insn[i]].line, "unknown label '%s'", p->pending_label[i]);
    k->insns[p->pending_insn[i]].o[0].imm = at;
  }
  for (int i = 0; i < p->n_labels; i++) free(p->labels[i]);
  for (int i = 0; i < p->n_pending; i++) free(p->pending_label[i]);
  p->n_labels = p->n_pending = 0;
  k->n_regs = p->n_regs;
  /* predicates used as guards must be predicates */
  for (int i = 0; i < k->n_insns; i++) {
    int g = k->insns[i].guard;
    if (g < 0) continue;
    bool pred = false;
    for (int r = 0; r < p->n_rc; r++)
      if (g >= p->rc[r].base && g < p->rc[r].base + p->rc[r].count) pred = p->rc[r].is_pred;
    if (!pred) return fail(p, k->insns[i].line, "guard of '%s' is not a predicate", k->insns[i].text);
  }
  return true;
}

pe_module *pe_module_load(const char *ptx, char *err, size_t errlen) {
  parser p;
  memset(&p, 0, sizeof p);
  p.s = ptx, p.n = strlen(ptx), p.line = 1, p.err = err, p.errlen = errlen;
  if (errlen) err[0] = 0;
  pe_module *m = calloc(1, sizeof *m);
  m->sm = 80;
  while (!p.failed) {
    skip_ws(&p);
    if (p.i >= p.n) break;
    int line = p.line;
    char w[128];
    if (!word(&p, w, sizeof w)) {
      fail(&p, line, "unexpected '%c'", p.s[p.i]);
      break;
    }
    if (!strcmp(w, ".version") || !strcmp(w, ".address_size")) {
      while (p.i < p.n && p.s[p.i] != '\n') p.i++;
    } else if (!strcmp(w, ".target")) {
      char t[64];
      word(&p, t, sizeof t);
      if (strncmp(t, "sm_", 3) || atoi(t + 3) < 80) fail(&p, line, "unsupported target '%s' (sm_80 or newer)", t);
      else m->sm = atoi(t + 3);
      while (p.i < p.n && p.s[p.i] != '\n') p.i++;
    } else if (!strcmp(w, ".extern")) {
      char *st = statement(&p);
      if (!st) break;
      char nm[128] = "";
      int align = 0;
      if (sscanf(st, " .shared .align %d .b8 %127[A-Za-z0-9_$][]", &align, nm) != 2 || !strstr(st, "[]"))
        fail(&p, line, "unsupported declaration '.extern%s'", st);
      else if (p.smem_name[0]) fail(&p, line, "a second dynamic shared array '%s'", nm);
      else snprintf(p.smem_name, sizeof p.smem_name, "%s", nm);
      free(st);
    } else if (!strcmp(w, ".visible") || !strcmp(w, ".entry")) {
      if (!strcmp(w, ".visible")) {
        word(&p, w, sizeof w);
        if (strcmp(w, ".entry")) {
          fail(&p, line, "unsupported directive '.visible %s' (only .entry kernels)", w);
          break;
        }
      }
      parse_kernel(&p, m);
    } else {
      fail(&p, line, "unsupported directive '%s'", w);
    }
  }
  for (int i = 0; i < p.n_labels; i++) free(p.labels[i]);
  for (int i = 0; i < p.n_pending; i++) free(p.pending_label[i]);
  free(p.labels), free(p.label_at), free(p.pending_label), free(p.pending_insn);
  if (p.failed) {
    pe_module_destroy(m);
    return NULL;
  }
  return m;
}

void pe_module_destroy(pe_module *m) {
  if (!m) return;
  for (int i = 0; i < m->n_kernels; i++) {
    pe_kernel *k = &m->kernels[i];
    for (int j = 0; j < k->n_insns; j++) free(k->insns[j].text);
    for (int j = 0; j < k->n_params; j++) free(k->param_names[j]);
    free(k->insns), free(k->param_names), free(k->param_offset), free(k->param_size), free(k->name);
  }
  free(m->kernels);
  free(m);
}

int pe_module_kernel(const pe_module *m, const char *name) {
  for (int i = 0; i < m->n_kernels; i++)
    if (!strcmp(m->kernels[i].name, name)) return i;
  return -1;
}

int pe_kernel_n_params(const pe_module *m, int kernel) { return m->kernels[kernel].n_params; }

int pe_module_n_insns(const pe_module *m) {
  int n = 0;
  for (int i = 0; i < m->n_kernels; i++) n += m->kernels[i].n_insns;
  return n;
}
