/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxemu_exec.c: runs decoded kernels (ptxemu_internal.h) grid by grid,
 * CTA by CTA, with the checks of ptxemu.h.
 *
 * Threads: each has its registers, a pc and a state (running, parked at
 * a warp-collective instruction, waiting at the barrier, exited). A warp
 * step runs the instruction at the lowest pc among the warp's running
 * lanes for all lanes at that pc (divergent paths run one after the
 * other and meet again where their pcs meet). A lane reaching shfl.sync,
 * ldmatrix or mma.sync parks; the instruction runs once every live lane
 * of the warp is parked at it (PTX's .sync.aligned), and anything else is
 * a divergence error. bar.sync parks lanes until every live thread of
 * the CTA waits; then the barrier epoch advances.
 *
 * Shared memory shadow, per byte: the epoch and warp of the last write,
 * of the last read (or "several warps"), and the number of cp.async
 * copies still in flight to it. A cp.async counts as a write by its
 * warp at the epoch of the wait that completes it; until then any access
 * to its bytes is an error.
 *
 * Local memory: each thread's window of the kernel's .local frame
 * (k->local_bytes at PE_LOCAL_BASE), filled with 0xff bytes when its CTA
 * starts, as shared memory is, so a read before a write shows as NaN; an
 * access outside the window is an error.
 *
 * Scalar instructions are ptxemu_alu.c's. mma.sync sums its 16 products
 * and the accumulator in double and rounds once to f32 (the products of
 * 16-bit values are exact; the ISA leaves the accumulation order open).
 */
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptxemu_internal.h"
#include "ptxemu_mem.h"

enum { ST_RUN, ST_COLL, ST_BAR, ST_EXIT };
enum { MULTI = -2 };

typedef struct shadow {
  uint32_t w_epoch, r_epoch;
  int16_t w_warp, r_warp;
  int16_t pending; /* cp.async copies in flight to this byte */
  int16_t pend_warp;
  int32_t pend_line;
} shadow;

typedef struct cp_op {
  int thread;
  int64_t group; /* -1: not yet committed */
  uint32_t dst;
  int n;
  int line;
  uint8_t data[16];
} cp_op;

typedef struct cta {
  const pe_kernel *k;
  pe_memory *mem;
  const pe_options *o;
  const uint8_t *params;
  unsigned grid[3], block[3], ctaid[3];
  int nthreads, nwarps, nregs;
  uint64_t *regs; /* [warp][reg][lane] */
  int *pc;
  uint8_t *state;
  uint8_t *smem;
  shadow *sh;
  unsigned smem_bytes;
  uint8_t *local; /* [thread][k->local_bytes] */
  uint32_t epoch;
  cp_op **cp;   /* per thread: its copies in flight */
  int *n_cp, *cap_cp;
  int64_t *groups; /* per thread: groups committed */
  char *err;
  size_t errlen;
  bool failed;
} cta;

#define REG(c, w, r, l) ((c)->regs[(((size_t)(w) * (size_t)(c)->nregs + (size_t)(r)) << 5) + (size_t)(l)])

static bool efail(cta *c, const pe_insn *in, int thread, const char *fmt, ...) {
  if (c->failed) return false;
  c->failed = true;
  int k = snprintf(c->err, c->errlen, "ptxemu: %s line %d: '%s': ", c->k->name, in ? in->line : 0, in ? in->text : "");
  va_list ap;
  va_start(ap, fmt);
  if (k >= 0 && (size_t)k < c->errlen) k += vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
  va_end(ap);
  if (k >= 0 && (size_t)k < c->errlen && thread >= 0)
    snprintf(c->err + k, c->errlen - (size_t)k, " (block (%u,%u,%u), thread %d, warp %d)", c->ctaid[0], c->ctaid[1],
             c->ctaid[2], thread, thread / 32);
  return false;
}

static uint64_t sreg(const cta *c, int thread, int id) {
  unsigned tid[3] = {(unsigned)thread % c->block[0], ((unsigned)thread / c->block[0]) % c->block[1],
                     (unsigned)thread / (c->block[0] * c->block[1])};
  if (id >= SR_TID && id < SR_TID + 3) return tid[id - SR_TID];
  if (id >= SR_NTID && id < SR_NTID + 3) return c->block[id - SR_NTID];
  if (id >= SR_CTAID && id < SR_CTAID + 3) return c->ctaid[id - SR_CTAID];
  if (id >= SR_NCTAID && id < SR_NCTAID + 3) return c->grid[id - SR_NCTAID];
  if (id == SR_LANEID) return (unsigned)thread % 32;
  return (unsigned)thread / 32;
}

static inline uint64_t rd(const cta *c, int w, int l, const pe_opnd *o) {
  switch (o->kind) {
  case K_REG: return REG(c, w, o->r[0], l);
  case K_IMM:
  case K_SYM: return (uint64_t)o->imm;
  case K_SREG: return sreg(c, w * 32 + l, (int)o->imm);
  default: return 0;
  }
}

/* ---- shared memory and its shadow ---- */

static bool smem_check(cta *c, const pe_insn *in, int thread, uint64_t off, int n, bool write) {
  if (off + (uint64_t)n > c->smem_bytes || off + (uint64_t)n < off)
    return efail(c, in, thread, "shared %s of %d bytes at offset %llu is outside the %u bytes of shared memory",
                 write ? "write" : "read", n, (unsigned long long)off, c->smem_bytes);
  int w = thread / 32;
  for (int i = 0; i < n; i++) {
    shadow *s = &c->sh[off + (uint64_t)i];
    if (s->pending)
      return efail(c, in, thread,
                   "shared %s at offset %llu of bytes a cp.async (line %d, warp %d) is still copying: no "
                   "cp.async.wait_group has completed it",
                   write ? "write" : "read", (unsigned long long)(off + (uint64_t)i), s->pend_line, s->pend_warp);
    if (s->w_epoch == c->epoch && s->w_warp != w)
      return efail(c, in, thread,
                   "shared-memory race: %s at offset %llu of a byte warp %d wrote with no barrier in between",
                   write ? "write" : "read", (unsigned long long)(off + (uint64_t)i), s->w_warp);
    if (write && s->r_epoch == c->epoch && s->r_warp != w)
      return efail(c, in, thread,
                   "shared-memory race: write at offset %llu of a byte %s read with no barrier in between",
                   (unsigned long long)(off + (uint64_t)i), s->r_warp == MULTI ? "other warps" : "another warp");
    if (write) s->w_epoch = c->epoch, s->w_warp = (int16_t)w;
    else if (s->r_epoch != c->epoch) s->r_epoch = c->epoch, s->r_warp = (int16_t)w;
    else if (s->r_warp != w) s->r_warp = MULTI;
  }
  return true;
}

/* Completes cp.async op i: its data lands (if it has not) and counts as
 * a write by its warp now. */
static void cp_complete(cta *c, int thread, int i) {
  cp_op *op = &c->cp[thread][i];
  for (int b = 0; b < op->n; b++) {
    shadow *s = &c->sh[op->dst + (uint32_t)b];
    s->pending--;
    s->w_epoch = c->epoch, s->w_warp = (int16_t)(op->thread / 32);
  }
  if (c->o->landing == PE_LAND_LATE) memcpy(c->smem + op->dst, op->data, (size_t)op->n);
  c->cp[thread][i] = c->cp[thread][--c->n_cp[thread]];
}

/* cp.async.wait_group n for `thread` (n < 0: everything, at exit). */
static void cp_wait(cta *c, int thread, int64_t n) {
  int64_t limit = n < 0 ? INT64_MAX : c->groups[thread] - n; /* groups numbered 1.. */
  for (int i = 0; i < c->n_cp[thread];) {
    cp_op *op = &c->cp[thread][i];
    if ((op->group >= 1 && op->group <= limit) || n < 0) cp_complete(c, thread, i);
    else i++;
  }
}

/* ---- the instructions ---- */

static bool guard_ok(const cta *c, int w, int l, const pe_insn *in) {
  if (in->guard < 0) return true;
  bool v = (REG(c, w, in->guard, l) & 1) != 0;
  return in->guard_neg ? !v : v;
}

static bool do_ldst(cta *c, int w, int l, const pe_insn *in) {
  int thread = w * 32 + l;
  int es = pe_ty_bytes((pe_ty)in->ty), nv = in->vec;
  const pe_opnd *mo = &in->o[in->op == OP_LD ? 1 : 0], *vo = &in->o[in->op == OP_LD ? 0 : 1];
  uint64_t addr = (uint64_t)mo->imm + (mo->r[0] >= 0 ? REG(c, w, mo->r[0], l) : 0);
  int n = es * nv;
  uint8_t buf[32];
  if (addr % (uint64_t)(n > 16 ? 16 : n))
    return efail(c, in, thread, "misaligned %d-byte access at %#llx", n, (unsigned long long)addr);
  uint8_t *p = NULL;
  int space = in->space;
  if (space == S_NONE) /* generic: local where the local window is, else global */
    space = addr >= PE_LOCAL_BASE && addr - PE_LOCAL_BASE < PE_LOCAL_MAX ? S_LOCAL : S_GLOBAL;
  if (space == S_PARAM) {
    if (addr + (uint64_t)n > (uint64_t)c->k->param_bytes) return efail(c, in, thread, "parameter read out of range");
    p = (uint8_t *)(uintptr_t)(c->params + addr);
  } else if (space == S_SHARED) {
    if (!smem_check(c, in, thread, addr, n, in->op == OP_ST)) return false;
    p = c->smem + addr;
  } else if (space == S_LOCAL) {
    uint64_t lb = (uint64_t)c->k->local_bytes, off = addr - PE_LOCAL_BASE;
    if (addr < PE_LOCAL_BASE || off + (uint64_t)n > lb || off + (uint64_t)n < off)
      return efail(c, in, thread, "local %s of %d bytes at %#llx is outside the thread's %llu bytes of local memory at %#llx",
                   in->op == OP_LD ? "read" : "write", n, (unsigned long long)addr, (unsigned long long)lb,
                   (unsigned long long)PE_LOCAL_BASE);
    p = c->local + (size_t)thread * lb + off;
  } else {
    p = pe_memory_at(c->mem, addr, (size_t)n);
    if (!p) {
      pe_region r;
      if (pe_memory_region(c->mem, addr, &r))
        return efail(c, in, thread, "global %s of %d bytes at %#llx runs past the end of a %zu-byte allocation at %#llx",
                     in->op == OP_LD ? "read" : "write", n, (unsigned long long)addr, r.size, (unsigned long long)r.addr);
      return efail(c, in, thread, "global %s of %d bytes at %#llx is outside every allocation",
                   in->op == OP_LD ? "read" : "write", n, (unsigned long long)addr);
    }
  }
  if (in->op == OP_LD) {
    memcpy(buf, p, (size_t)n);
    for (int v = 0; v < nv; v++) {
      uint64_t x = 0;
      memcpy(&x, buf + v * es, (size_t)es);
      if (is_signed((pe_ty)in->ty)) x = (uint64_t)sext(x, (pe_ty)in->ty);
      int r = vo->kind == K_VEC ? vo->r[v] : vo->r[0];
      REG(c, w, r, l) = x;
    }
  } else {
    for (int v = 0; v < nv; v++) {
      uint64_t x = vo->kind == K_VEC ? REG(c, w, vo->r[v], l) : rd(c, w, l, vo);
      memcpy(buf + v * es, &x, (size_t)es);
    }
    memcpy(p, buf, (size_t)n);
  }
  return true;
}

/* cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size} */
static bool do_cp_async(cta *c, int w, int l, const pe_insn *in) {
  int thread = w * 32 + l;
  uint64_t dst = (uint64_t)in->o[0].imm + (in->o[0].r[0] >= 0 ? REG(c, w, in->o[0].r[0], l) : 0);
  uint64_t src = (uint64_t)in->o[1].imm + (in->o[1].r[0] >= 0 ? REG(c, w, in->o[1].r[0], l) : 0);
  int n = (int)in->o[2].imm;
  uint64_t srcn = in->n_ops > 3 ? zext(rd(c, w, l, &in->o[3]), T_U32) : (uint64_t)n;
  if (srcn > (uint64_t)n) return efail(c, in, thread, "src-size %llu exceeds cp-size %d", (unsigned long long)srcn, n);
  if (dst % (uint64_t)n || src % (uint64_t)n)
    return efail(c, in, thread, "cp.async addresses must be aligned to %d bytes (dst %#llx, src %#llx)", n,
                 (unsigned long long)dst, (unsigned long long)src);
  if (dst + (uint64_t)n > c->smem_bytes)
    return efail(c, in, thread, "cp.async writes %d bytes at shared offset %llu, outside the %u bytes of shared memory", n,
                 (unsigned long long)dst, c->smem_bytes);
  cp_op op = {.thread = thread, .group = -1, .dst = (uint32_t)dst, .n = n, .line = in->line};
  memset(op.data, 0, sizeof op.data); /* bytes past src-size are zero-filled */
  if (srcn) {
    uint8_t *p = pe_memory_at(c->mem, src, (size_t)srcn);
    if (!p)
      return efail(c, in, thread, "cp.async reads %llu bytes at %#llx, outside every allocation", (unsigned long long)srcn,
                   (unsigned long long)src);
    memcpy(op.data, p, (size_t)srcn);
  }
  /* the copy may land any time from now: it conflicts with what other
   * warps read or wrote in this barrier interval, and with other copies */
  for (int b = 0; b < n; b++) {
    shadow *s = &c->sh[dst + (uint64_t)b];
    if (s->pending)
      return efail(c, in, thread, "cp.async to shared offset %llu while an earlier cp.async (line %d) to it is in flight",
                   (unsigned long long)(dst + (uint64_t)b), s->pend_line);
    if ((s->r_epoch == c->epoch && s->r_warp != w) || (s->w_epoch == c->epoch && s->w_warp != w))
      return efail(c, in, thread,
                   "shared-memory race: cp.async to offset %llu of a byte another warp accessed with no barrier in between",
                   (unsigned long long)(dst + (uint64_t)b));
    s->pending++, s->pend_line = in->line, s->pend_warp = (int16_t)w;
  }
  if (c->o->landing == PE_LAND_EARLY) memcpy(c->smem + dst, op.data, (size_t)n);
  if (c->n_cp[thread] == c->cap_cp[thread]) {
    c->cap_cp[thread] = c->cap_cp[thread] ? c->cap_cp[thread] * 2 : 16;
    c->cp[thread] = realloc(c->cp[thread], (size_t)c->cap_cp[thread] * sizeof *c->cp[thread]);
  }
  c->cp[thread][c->n_cp[thread]++] = op;
  return true;
}

/* ---- warp-collective instructions (all live lanes at one pc) ---- */

static bool do_shfl(cta *c, int w, const pe_insn *in, uint32_t live) {
  uint64_t res[32];
  for (int l = 0; l < 32; l++) {
    if (!(live >> l & 1)) continue;
    uint32_t member = (uint32_t)rd(c, w, l, &in->o[4]);
    if ((member & live) != member || !(member >> l & 1))
      return efail(c, in, w * 32 + l, "membermask %#x names lanes that are not executing it (live lanes %#x)", member, live);
    uint32_t b = (uint32_t)rd(c, w, l, &in->o[2]), cc = (uint32_t)rd(c, w, l, &in->o[3]);
    uint32_t bval = b & 31, cval = cc & 31, seg = (cc >> 8) & 31;
    uint32_t maxl = ((uint32_t)l & seg) | (cval & ~seg), minl = (uint32_t)l & seg;
    int j;
    bool pval;
    switch ((pe_shfl)in->shfl) {
    case SH_UP: j = l - (int)bval, pval = j >= (int)maxl; break;
    case SH_DOWN: j = l + (int)bval, pval = j <= (int)maxl; break;
    case SH_BFLY: j = l ^ (int)bval, pval = j <= (int)maxl; break;
    default: j = (int)(minl | (bval & ~seg)), pval = j <= (int)maxl; break;
    }
    if (!pval) j = l;
    if (j < 0 || j > 31 || !(member >> j & 1))
      return efail(c, in, w * 32 + l, "reads lane %d, which is not in the membermask %#x", j, member);
    res[l] = rd(c, w, j, &in->o[1]);
  }
  for (int l = 0; l < 32; l++)
    if (live >> l & 1) REG(c, w, in->o[0].r[0], l) = zext(res[l], T_B32);
  return true;
}

static bool do_ldmatrix(cta *c, int w, const pe_insn *in, uint32_t live) {
  int num = in->vec;
  if (live != 0xffffffffu)
    return efail(c, in, w * 32 + __builtin_ctz(~live), "ldmatrix needs all 32 lanes of the warp (live %#x)", live);
  uint16_t m[4][8][8];
  for (int i = 0; i < num; i++)
    for (int r = 0; r < 8; r++) {
      int l = i * 8 + r;
      uint64_t addr = (uint64_t)in->o[1].imm + (in->o[1].r[0] >= 0 ? REG(c, w, in->o[1].r[0], l) : 0);
      if (addr % 16) return efail(c, in, w * 32 + l, "ldmatrix row address %#llx is not 16-byte aligned", (unsigned long long)addr);
      if (!smem_check(c, in, w * 32 + l, addr, 16, false)) return false;
      memcpy(m[i][r], c->smem + addr, 16);
    }
  for (int l = 0; l < 32; l++)
    for (int i = 0; i < num; i++) {
      int row = l / 4, col = 2 * (l % 4);
      uint16_t lo, hi;
      if (in->trans) lo = m[i][col][row], hi = m[i][col + 1][row];
      else lo = m[i][row][col], hi = m[i][row][col + 1];
      REG(c, w, in->o[0].r[i], l) = (uint64_t)lo | (uint64_t)hi << 16;
    }
  return true;
}

static bool do_mma(cta *c, int w, const pe_insn *in, uint32_t live) {
  if (live != 0xffffffffu)
    return efail(c, in, w * 32 + __builtin_ctz(~live), "mma.sync needs all 32 lanes of the warp (live %#x)", live);
  double A[16][16], Bm[16][8], C[16][8];
  pe_ty t = (pe_ty)in->ty2;
  for (int l = 0; l < 32; l++) {
    int g = l >> 2, tg = l & 3;
    for (int i = 0; i < 8; i++) { /* a_i: register i/2, half i%2 */
      uint64_t r = REG(c, w, in->o[1].r[i / 2], l);
      int row = g + ((i / 2) % 2) * 8, col = tg * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = pe_fval((r >> (16 * (i & 1))) & 0xffff, t);
    }
    for (int i = 0; i < 4; i++) { /* b_i */
      uint64_t r = REG(c, w, in->o[2].r[i / 2], l);
      int row = tg * 2 + (i & 1) + (i >= 2 ? 8 : 0), col = g;
      Bm[row][col] = pe_fval((r >> (16 * (i & 1))) & 0xffff, t);
    }
    for (int i = 0; i < 4; i++) { /* c_i */
      int row = g + (i >= 2 ? 8 : 0), col = tg * 2 + (i & 1);
      C[row][col] = f32_of(REG(c, w, in->o[3].r[i], l));
    }
  }
  for (int l = 0; l < 32; l++) {
    int g = l >> 2, tg = l & 3;
    for (int i = 0; i < 4; i++) {
      int row = g + (i >= 2 ? 8 : 0), col = tg * 2 + (i & 1);
      double s = 0;
      for (int kk = 0; kk < 16; kk++) s += A[row][kk] * Bm[kk][col];
      REG(c, w, in->o[0].r[i], l) = bits_f32((float)(s + C[row][col]));
    }
  }
  return true;
}

/* ---- scheduling ---- */

static bool is_collective(pe_op op) { return op == OP_SHFL || op == OP_LDMATRIX || op == OP_MMA; }

static void lane_exit(cta *c, int thread) {
  c->state[thread] = ST_EXIT;
  cp_wait(c, thread, -1); /* a thread's copies complete before it is gone */
}

/* Operand o of every lane of warp w: a register row, or `tmp` filled. */
static const uint64_t *opv(const cta *c, int w, const pe_opnd *o, uint32_t mask, uint64_t *tmp) {
  if (o->kind == K_REG) return &REG(c, w, o->r[0], 0);
  if (o->kind == K_SREG) {
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      tmp[l] = sreg(c, w * 32 + l, (int)o->imm);
    }
    return tmp;
  }
  for (int l = 0; l < 32; l++) tmp[l] = (uint64_t)o->imm;
  return tmp;
}

#define EACH(m) for (uint32_t m_ = (m); m_; m_ &= m_ - 1)
#define LANE __builtin_ctz(m_)

/* Executes a non-collective instruction for the lanes in `mask` of warp
 * w (all at its pc); false on error. The common f32 and integer forms
 * have loops of their own; the rest goes lane by lane. */
static bool exec_warp(cta *c, int w, uint32_t mask, const pe_insn *in) {
  int base = w * 32;
  uint32_t act = mask;
  if (in->guard >= 0) {
    const uint64_t *g = &REG(c, w, in->guard, 0);
    act = 0;
    EACH(mask) {
      int l = LANE;
      if (((g[l] & 1) != 0) != in->guard_neg) act |= 1u << l;
    }
  }
  pe_op op = (pe_op)in->op;
  pe_ty t = (pe_ty)in->ty;
  if (op == OP_MOV && (in->o[0].kind == K_VEC || in->o[1].kind == K_VEC)) { /* b64 (b32) <-> two b32 (b16) halves */
    bool unpack = in->o[0].kind == K_VEC;
    const pe_opnd *v = &in->o[unpack ? 0 : 1], *r = &in->o[unpack ? 1 : 0];
    int hb = pe_ty_bytes(t) * 4; /* bits of a half */
    uint64_t hm = mask_of(hb / 8);
    EACH(act) {
      int l = LANE;
      if (unpack) {
        uint64_t x = REG(c, w, r->r[0], l);
        REG(c, w, v->r[0], l) = x & hm, REG(c, w, v->r[1], l) = (x >> hb) & hm;
      } else {
        REG(c, w, r->r[0], l) = (REG(c, w, v->r[0], l) & hm) | ((REG(c, w, v->r[1], l) & hm) << hb);
      }
    }
    EACH(mask) c->pc[base + LANE]++;
    return true;
  }
  uint64_t t1[32], t2[32], t3[32];
  const uint64_t *x1 = in->n_ops > 1 ? opv(c, w, &in->o[1], act, t1) : NULL;
  const uint64_t *x2 = in->n_ops > 2 && in->o[2].kind != K_MEM && in->o[2].kind != K_VEC ? opv(c, w, &in->o[2], act, t2) : NULL;
  const uint64_t *x3 = in->n_ops > 3 && in->o[3].kind != K_MEM && in->o[3].kind != K_VEC ? opv(c, w, &in->o[3], act, t3) : NULL;
  uint64_t *d = in->n_ops > 0 && in->o[0].kind == K_REG ? &REG(c, w, in->o[0].r[0], 0) : NULL;
  bool done = false;
  if (t == T_F32 && !in->ftz && !in->sat && !in->approx) {
    done = true;
    switch (op) {
    case OP_FMA: EACH(act) { int l = LANE; d[l] = bits_f32(fmaf(f32_of(x1[l]), f32_of(x2[l]), f32_of(x3[l]))); } break;
    case OP_ADD: EACH(act) { int l = LANE; d[l] = bits_f32(f32_of(x1[l]) + f32_of(x2[l])); } break;
    case OP_SUB: EACH(act) { int l = LANE; d[l] = bits_f32(f32_of(x1[l]) - f32_of(x2[l])); } break;
    case OP_MUL: EACH(act) { int l = LANE; d[l] = bits_f32(f32_of(x1[l]) * f32_of(x2[l])); } break;
    case OP_MOV: EACH(act) { int l = LANE; d[l] = x1[l] & 0xffffffffu; } break;
    case OP_SELP: EACH(act) { int l = LANE; d[l] = (x3[l] & 1 ? x1[l] : x2[l]) & 0xffffffffu; } break;
    default: done = false;
    }
  } else if ((t == T_S64 || t == T_U64 || t == T_B64) && !in->sat) {
    done = true;
    switch (op) {
    case OP_ADD: EACH(act) { int l = LANE; d[l] = x1[l] + x2[l]; } break;
    case OP_SUB: EACH(act) { int l = LANE; d[l] = x1[l] - x2[l]; } break;
    case OP_MOV: EACH(act) { int l = LANE; d[l] = x1[l]; } break;
    case OP_CVTA: EACH(act) { int l = LANE; d[l] = x1[l]; } break;
    case OP_SELP: EACH(act) { int l = LANE; d[l] = x3[l] & 1 ? x1[l] : x2[l]; } break;
    case OP_SHL: EACH(act) { int l = LANE; uint64_t sh = x2[l] & 0xffffffffu; d[l] = sh >= 64 ? 0 : x1[l] << sh; } break;
    default: done = false;
    }
  } else if ((t == T_S32 || t == T_U32 || t == T_B32) && !in->sat) {
    done = true;
    switch (op) {
    case OP_ADD: EACH(act) { int l = LANE; d[l] = (x1[l] + x2[l]) & 0xffffffffu; } break;
    case OP_AND: EACH(act) { int l = LANE; d[l] = (x1[l] & x2[l]) & 0xffffffffu; } break;
    case OP_OR: EACH(act) { int l = LANE; d[l] = (x1[l] | x2[l]) & 0xffffffffu; } break;
    case OP_XOR: EACH(act) { int l = LANE; d[l] = (x1[l] ^ x2[l]) & 0xffffffffu; } break;
    case OP_MOV: EACH(act) { int l = LANE; d[l] = x1[l] & 0xffffffffu; } break;
    case OP_SELP: EACH(act) { int l = LANE; d[l] = (x3[l] & 1 ? x1[l] : x2[l]) & 0xffffffffu; } break;
    default: done = false;
    }
  }
  if (!done) {
    EACH(act) {
      int l = LANE, thread = base + l;
      uint64_t x[4] = {0, x1 ? x1[l] : 0, x2 ? x2[l] : 0, x3 ? x3[l] : 0}, v = 0;
      const char *why;
      switch (op) {
      case OP_MOV: v = t == T_PRED ? (x[1] != 0) : zext(x[1], t); break;
      case OP_LD:
      case OP_ST:
        if (!do_ldst(c, w, l, in)) return false;
        continue;
      case OP_CVTA: v = x[1]; break;
      case OP_CVT:
        if ((why = pe_alu_cvt(in, x, &v))) return efail(c, in, thread, "%s", why);
        break;
      case OP_ADD: case OP_SUB: case OP_MUL: case OP_MAD: case OP_FMA: case OP_DIV: case OP_REM:
      case OP_MIN: case OP_MAX: case OP_NEG: case OP_ABS: case OP_RCP: case OP_SQRT: case OP_RSQRT:
      case OP_EX2: case OP_LG2: case OP_SIN: case OP_COS: case OP_TANH:
        if ((why = is_float(t) ? pe_alu_float(in, x, &v) : pe_alu_int(in, x, &v))) return efail(c, in, thread, "%s", why);
        break;
      case OP_AND: case OP_OR: case OP_XOR: case OP_NOT: case OP_SHL: case OP_SHR: case OP_BFE:
        if ((why = pe_alu_int(in, x, &v))) return efail(c, in, thread, "%s", why);
        break;
      case OP_SELP: v = zext((x[3] & 1) ? x[1] : x[2], t); break;
      case OP_SETP: {
        bool fl = is_float(t);
        v = pe_alu_cmp((pe_cmp)in->cmp, fl ? pe_fval(x[1], t) : 0, fl ? pe_fval(x[2], t) : 0, sext(x[1], t), sext(x[2], t),
                zext(x[1], t), zext(x[2], t), fl, is_signed(t));
        break;
      }
      case OP_BRA: case OP_RET: continue;
      case OP_CP_ASYNC:
        if (!do_cp_async(c, w, l, in)) return false;
        continue;
      case OP_CP_COMMIT: {
        int64_t g = ++c->groups[thread];
        for (int i = 0; i < c->n_cp[thread]; i++)
          if (c->cp[thread][i].group < 0) c->cp[thread][i].group = g;
        continue;
      }
      case OP_CP_WAIT: cp_wait(c, thread, in->o[0].imm); continue;
      case OP_BAR: case OP_SHFL: case OP_LDMATRIX: case OP_MMA:
        return efail(c, in, thread, "internal: collective executed per lane");
      }
      d[l] = v;
    }
  }
  /* control: every lane of mask moves on; taken branches jump, ret exits */
  if (op == OP_BRA) {
    EACH(mask) {
      int l = LANE;
      c->pc[base + l] = (act >> l & 1) ? (int)in->o[0].imm : c->pc[base + l] + 1;
    }
  } else if (op == OP_RET) {
    EACH(mask) {
      int l = LANE;
      if (act >> l & 1) lane_exit(c, base + l);
      else c->pc[base + l]++;
    }
  } else {
    EACH(mask) c->pc[base + LANE]++;
  }
  return true;
}

/* Runs the collective that every live lane of warp w is parked at. */
static bool run_collective(cta *c, int w) {
  int base = w * 32, pc = -1;
  uint32_t live = 0;
  for (int l = 0; l < 32 && base + l < c->nthreads; l++) {
    int t = base + l;
    if (c->state[t] == ST_EXIT) continue;
    if (c->state[t] != ST_COLL || (pc >= 0 && c->pc[t] != pc)) {
      const pe_insn *in = &c->k->insns[c->pc[t]];
      int other = -1;
      for (int q = 0; q < 32 && base + q < c->nthreads; q++)
        if (c->state[base + q] == ST_COLL) other = c->pc[base + q];
      return efail(c, other >= 0 ? &c->k->insns[other] : in, t,
                   "divergent warp: lanes wait at this warp-collective instruction while lane %d is at line %d (%s)",
                   l, in->line, c->state[t] == ST_BAR ? "a barrier" : "another collective");
    }
    pc = c->pc[t];
    live |= 1u << l;
  }
  if (pc < 0) return true;
  const pe_insn *in = &c->k->insns[pc];
  bool ok = in->op == OP_SHFL ? do_shfl(c, w, in, live) : in->op == OP_LDMATRIX ? do_ldmatrix(c, w, in, live) : do_mma(c, w, in, live);
  if (!ok) return false;
  for (int l = 0; l < 32; l++)
    if (live >> l & 1) c->state[base + l] = ST_RUN, c->pc[base + l]++;
  return true;
}

/* One step of warp w. Returns 1 if it ran something, 0 if it is blocked
 * (barrier or exited), -1 on error. */
static int warp_step(cta *c, int w) {
  int base = w * 32, minpc = -1, n_coll = 0, n_live = 0;
  for (int l = 0; l < 32 && base + l < c->nthreads; l++) {
    int t = base + l;
    if (c->state[t] == ST_RUN && (minpc < 0 || c->pc[t] < minpc)) minpc = c->pc[t];
    if (c->state[t] == ST_COLL) n_coll++;
    if (c->state[t] != ST_EXIT) n_live++;
  }
  if (minpc < 0) {
    if (n_coll == 0) return 0;
    return run_collective(c, w) ? 1 : -1;
  }
  if (minpc >= c->k->n_insns) {
    const pe_insn *last = c->k->n_insns ? &c->k->insns[c->k->n_insns - 1] : NULL;
    return efail(c, last, base, "fell off the end of the kernel without ret"), -1;
  }
  const pe_insn *in = &c->k->insns[minpc];
  pe_op op = (pe_op)in->op;
  uint32_t mask = 0;
  for (int l = 0; l < 32 && base + l < c->nthreads; l++)
    if (c->state[base + l] == ST_RUN && c->pc[base + l] == minpc) mask |= 1u << l;
  if (!is_collective(op) && op != OP_BAR) {
    if (!exec_warp(c, w, mask, in)) return -1;
    return 1;
  }
  for (int l = 0; l < 32 && base + l < c->nthreads; l++) {
    int t = base + l;
    if (!(mask >> l & 1)) continue;
    if (!guard_ok(c, w, l, in)) {
      c->pc[t]++;
      continue;
    }
    c->state[t] = op == OP_BAR ? ST_BAR : ST_COLL;
    if (op == OP_BAR) {
      /* a barrier is .aligned: the whole warp must be at it together */
      for (int q = 0; q < 32 && base + q < c->nthreads; q++)
        if (c->state[base + q] == ST_COLL)
          return efail(c, in, t, "barrier reached while lane %d waits at a warp-collective instruction (line %d)", q,
                       c->k->insns[c->pc[base + q]].line), -1;
    }
  }
  (void)n_live;
  /* collectives run as soon as every live lane has arrived */
  if (is_collective(op)) {
    bool all = true;
    for (int l = 0; l < 32 && base + l < c->nthreads; l++)
      if (c->state[base + l] == ST_RUN) all = false;
    if (all) return run_collective(c, w) ? 1 : -1;
  }
  return 1;
}

static bool run_cta(cta *c) {
  int nw = c->nwarps;
  uint64_t steps = 0, max = c->o->max_steps ? c->o->max_steps : (uint64_t)1 << 28;
  for (;;) {
    bool progress = false;
    for (int i = 0; i < nw; i++) {
      int w = c->o->order == PE_ORDER_REVERSE ? nw - 1 - i : i;
      if (c->o->order == PE_ORDER_INTERLEAVE) {
        int r = warp_step(c, w);
        if (r < 0) return false;
        if (r) progress = true, steps++;
      } else {
        int r;
        while ((r = warp_step(c, w)) > 0)
          if (++steps > max) break;
        if (r < 0) return false;
        progress |= steps > 0;
      }
      if (steps > max) {
        const pe_insn *in = &c->k->insns[c->pc[w * 32] < c->k->n_insns ? c->pc[w * 32] : 0];
        return efail(c, in, w * 32, "runaway: more than %llu warp-instructions in one CTA", (unsigned long long)max);
      }
    }
    (void)progress;
    /* every warp is blocked: release the barrier, or finish */
    bool any_bar = false, any_run = false;
    for (int t = 0; t < c->nthreads; t++) {
      if (c->state[t] == ST_BAR) any_bar = true;
      if (c->state[t] == ST_RUN || c->state[t] == ST_COLL) any_run = true;
    }
    if (any_run) continue; /* interleaved order: not every warp is blocked yet */
    if (!any_bar) break;
    c->epoch++;
    for (int t = 0; t < c->nthreads; t++)
      if (c->state[t] == ST_BAR) c->state[t] = ST_RUN, c->pc[t]++;
  }
  for (int t = 0; t < c->nthreads; t++) cp_wait(c, t, -1);
  return true;
}

void pe_options_from_env(pe_options *o) {
  memset(o, 0, sizeof *o);
  const char *s = getenv("CASTOR_PTXEMU_ORDER");
  if (s && !strcmp(s, "reverse")) o->order = PE_ORDER_REVERSE;
  else if (s && !strcmp(s, "interleave")) o->order = PE_ORDER_INTERLEAVE;
  s = getenv("CASTOR_PTXEMU_LANDING");
  if (s && !strcmp(s, "early")) o->landing = PE_LAND_EARLY;
}

bool pe_launch(pe_memory *mem, const pe_module *m, int kernel, const unsigned grid[3], const unsigned block[3],
               unsigned shared_bytes, void **params, const pe_options *o, char *err, size_t errlen) {
  const pe_kernel *k = &m->kernels[kernel];
  pe_options defaults;
  if (!o) pe_options_from_env(&defaults), o = &defaults;
  cta c;
  memset(&c, 0, sizeof c);
  c.k = k, c.mem = mem, c.o = o, c.err = err, c.errlen = errlen;
  if (errlen) err[0] = 0;
  uint64_t nthreads = (uint64_t)block[0] * block[1] * block[2];
  if (nthreads == 0 || nthreads > 1024 || grid[0] == 0 || grid[1] == 0 || grid[2] == 0) {
    snprintf(err, errlen, "ptxemu: %s: invalid launch geometry grid (%u,%u,%u) block (%u,%u,%u)", k->name, grid[0],
             grid[1], grid[2], block[0], block[1], block[2]);
    return false;
  }
  if (shared_bytes > 227 * 1024) {
    snprintf(err, errlen, "ptxemu: %s: %u bytes of dynamic shared memory, more than a CTA may have", k->name, shared_bytes);
    return false;
  }
  uint8_t *pbuf = calloc(1, (size_t)k->param_bytes + 8);
  for (int i = 0; i < k->n_params; i++) memcpy(pbuf + k->param_offset[i], params[i], (size_t)k->param_size[i]);
  c.params = pbuf;
  memcpy(c.grid, grid, sizeof c.grid), memcpy(c.block, block, sizeof c.block);
  c.nthreads = (int)nthreads, c.nwarps = (c.nthreads + 31) / 32, c.nregs = k->n_regs > 0 ? k->n_regs : 1;
  c.regs = malloc((size_t)c.nwarps * (size_t)c.nregs * 32 * sizeof *c.regs);
  c.pc = malloc((size_t)c.nthreads * sizeof *c.pc);
  c.state = malloc((size_t)c.nthreads);
  c.groups = malloc((size_t)c.nthreads * sizeof *c.groups);
  c.cp = calloc((size_t)c.nthreads, sizeof *c.cp);
  c.n_cp = calloc((size_t)c.nthreads, sizeof *c.n_cp);
  c.cap_cp = calloc((size_t)c.nthreads, sizeof *c.cap_cp);
  pe_alu_init();
  c.smem_bytes = shared_bytes;
  c.smem = malloc((size_t)shared_bytes + 16);
  c.sh = malloc(((size_t)shared_bytes + 16) * sizeof *c.sh);
  size_t local_total = (size_t)c.nthreads * (size_t)k->local_bytes;
  c.local = malloc(local_total + 1);
  bool ok = true;
  uint64_t n_cta = (uint64_t)grid[0] * grid[1] * grid[2];
  for (uint64_t b = 0; ok && b < n_cta; b++) {
    uint64_t id = o->order == PE_ORDER_REVERSE ? n_cta - 1 - b : b;
    c.ctaid[0] = (unsigned)(id % grid[0]), c.ctaid[1] = (unsigned)(id / grid[0] % grid[1]),
    c.ctaid[2] = (unsigned)(id / grid[0] / grid[1]);
    /* registers start as garbage on a GPU: poison them too */
    memset(c.regs, 0xff, (size_t)c.nwarps * (size_t)c.nregs * 32 * sizeof *c.regs);
    memset(c.pc, 0, (size_t)c.nthreads * sizeof *c.pc);
    memset(c.state, ST_RUN, (size_t)c.nthreads);
    memset(c.groups, 0, (size_t)c.nthreads * sizeof *c.groups);
    memset(c.smem, 0xff, (size_t)shared_bytes + 16);
    memset(c.sh, 0, ((size_t)shared_bytes + 16) * sizeof *c.sh);
    memset(c.local, 0xff, local_total);
    c.epoch = 1;
    memset(c.n_cp, 0, (size_t)c.nthreads * sizeof *c.n_cp);
    ok = run_cta(&c);
  }
  for (int t = 0; t < c.nthreads; t++) free(c.cp[t]);
  free(c.regs), free(c.pc), free(c.state), free(c.groups), free(c.smem), free(c.sh), free(c.local), free(c.cp), free(c.n_cp),
      free(c.cap_cp), free(pbuf);
  return ok;
}
