/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_rnn.c: the recurrent ops' kernel in the kit (simple_rnn, gru, lstm;
 * ir_ops.def gives each formula): a scan over time, one batch row per
 * iteration of the kernel's row range, the recurrent kernel r resident
 * (read in place, row k of r once per step), the state in f32 scratch on
 * the stack. The input projection xp = x W + b of every step is the matmul
 * before the op (one GEMM over N*T rows); this kernel adds h r per step
 * and applies the gates. Reached by kernel class: a row-wise op without a
 * line formula is a row kernel of cg_train.c's table, on every target.
 *
 * Compile time does not depend on the sequence length: the loop over time
 * is a loop in the emitted code, never unrolled here.
 *
 * Numerics: products summed in f32 in k order (fmuladd), the gates in f32,
 * the new state rounded to the op's dtype at every step (a 16-bit policy's
 * layer carries its state in its compute dtype, as Keras computes it), the
 * same order as the float64 reference's (tests/ref/ref_rnn.c).
 */
#include "codegen/kernel/cg_train.h"

typedef struct rnn {
  cg_kctx *c;
  const ir_node *op, *xp, *r, *rb;
  int64_t h, gh, t;
  LLVMValueRef hs, cs, u, gs; /* f32 scratch: h [H], c [H], u [G*H], g*h [H] */
} rnn;

static LLVMValueRef at(rnn *s, LLVMValueRef a, LLVMValueRef j) {
  cg_emitter *e = s->c->e;
  return LLVMBuildGEP2(B, e->f32, a, &j, 1, "");
}

static LLVMValueRef ld(rnn *s, LLVMValueRef a, LLVMValueRef j) {
  return LLVMBuildLoad2(s->c->e->b, s->c->e->f32, at(s, a, j), "");
}

static void st(rnn *s, LLVMValueRef a, LLVMValueRef j, LLVMValueRef v) { LLVMBuildStore(s->c->e->b, v, at(s, a, j)); }

/* u[j0 .. j1) += sum_k src[k] * r[k, j] over k in order (src: h or g*h). */
static void recurrent_product(rnn *s, LLVMValueRef src, int64_t j0, int64_t j1) {
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  cg_loop lk = cg_loop_begin(c, i64c(0), i64c(s->h), 1, "k");
  LLVMValueRef hk = ld(s, src, lk.iv);
  LLVMValueRef rrow = LLVMBuildMul(B, lk.iv, i64c(s->gh), "r.row");
  cg_loop lj = cg_loop_begin(c, i64c(j0), i64c(j1), 1, "j");
  LLVMValueRef rv = load_f(c, s->r, LLVMBuildAdd(B, rrow, lj.iv, ""), 1);
  st(s, s->u, lj.iv, cg_fmuladd(e, hk, rv, ld(s, s->u, lj.iv)));
  cg_loop_end(c, &lj);
  cg_loop_end(c, &lk);
}

static LLVMValueRef sigm(cg_emitter *e, LLVMValueRef x) { return cg_emit_unary(e, IR_OP_SIGMOID, x, "sigmoid"); }
static LLVMValueRef tanh_(cg_emitter *e, LLVMValueRef x) { return cg_emit_unary(e, IR_OP_TANH, x, "tanh"); }

/* One step of batch row `row` reading time t: the state in s->hs (and
 * s->cs) becomes the next one, stored to y at time yt (t, or the step's
 * index with {reverse}=2). */
static void step(rnn *s, LLVMValueRef row, LLVMValueRef t, LLVMValueRef yt) {
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  const ir_node *op = s->op;
  ir_dtype dt = op->type.dtype;
  int64_t h = s->h;
  LLVMValueRef xbase = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(s->t), ""), t, ""), i64c(s->gh), "xp.base");
  bool gru = s->rb != NULL, gru_before = gru && !op->attr.reset_after;
  /* u = (gru: rb; else xp[row, t]) + h r, over the gates whose product is of h */
  cg_loop l0 = cg_loop_begin(c, i64c(0), i64c(s->gh), 1, "u0");
  LLVMValueRef init = gru ? load_f(c, s->rb, l0.iv, 1) : load_f(c, s->xp, LLVMBuildAdd(B, xbase, l0.iv, ""), 1);
  st(s, s->u, l0.iv, init);
  cg_loop_end(c, &l0);
  recurrent_product(s, s->hs, 0, gru_before ? 2 * h : s->gh);
  if (gru_before) { /* (g * h) r_h, g the reset gate */
    cg_loop lg = cg_loop_begin(c, i64c(0), i64c(h), 1, "gh");
    LLVMValueRef xr = load_f(c, s->xp, LLVMBuildAdd(B, xbase, LLVMBuildAdd(B, lg.iv, i64c(h), ""), ""), 1);
    LLVMValueRef g = sigm(e, LLVMBuildFAdd(B, xr, ld(s, s->u, LLVMBuildAdd(B, lg.iv, i64c(h), "")), ""));
    st(s, s->gs, lg.iv, LLVMBuildFMul(B, g, ld(s, s->hs, lg.iv), ""));
    cg_loop_end(c, &lg);
    recurrent_product(s, s->gs, 2 * h, 3 * h);
  }
  LLVMValueRef ybase = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(s->t), ""), yt, ""),
                                    i64c(s->cs ? 2 * h : h), "y.base");
  cg_loop lj = cg_loop_begin(c, i64c(0), i64c(h), 1, "gate");
  LLVMValueRef j = lj.iv, hn, cn = NULL;
#define U(g) ld(s, s->u, LLVMBuildAdd(B, j, i64c((g) * h), ""))
#define XP(g) load_f(c, s->xp, LLVMBuildAdd(B, xbase, LLVMBuildAdd(B, j, i64c((g) * h), ""), ""), 1)
  if (s->cs) { /* lstm: i, f, c, o */
    LLVMValueRef ig = sigm(e, U(0)), fg = sigm(e, U(1)), cc = tanh_(e, U(2)), og = sigm(e, U(3));
    cn = cg_emit_round_to(e, LLVMBuildFAdd(B, LLVMBuildFMul(B, fg, ld(s, s->cs, j), ""), LLVMBuildFMul(B, ig, cc, ""), ""),
                          dt, "c");
    hn = LLVMBuildFMul(B, og, tanh_(e, cn), "");
  } else if (gru) { /* z, r, h */
    LLVMValueRef z = sigm(e, LLVMBuildFAdd(B, XP(0), U(0), ""));
    LLVMValueRef pre = gru_before ? U(2) : LLVMBuildFMul(B, sigm(e, LLVMBuildFAdd(B, XP(1), U(1), "")), U(2), "");
    LLVMValueRef cand = tanh_(e, LLVMBuildFAdd(B, XP(2), pre, ""));
    LLVMValueRef hp = ld(s, s->hs, j);
    hn = LLVMBuildFAdd(B, LLVMBuildFMul(B, z, hp, ""), LLVMBuildFMul(B, LLVMBuildFSub(B, F(1.0), z, ""), cand, ""), "");
  } else {
    hn = tanh_(e, U(0));
  }
#undef U
#undef XP
  hn = cg_emit_round_to(e, hn, dt, "h");
  st(s, s->hs, j, hn);
  store_f(c, op, LLVMBuildAdd(B, ybase, j, ""), hn, 1);
  if (cn) {
    st(s, s->cs, j, cn);
    store_f(c, op, LLVMBuildAdd(B, ybase, LLVMBuildAdd(B, j, i64c(h), ""), ""), cn, 1);
  }
  cg_loop_end(c, &lj);
}

void cg_train_rnn(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  int gates = ir_rnn_gates(op->op), states = ir_rnn_states(op->op);
  CASTOR_ASSERT(gates > 0);
  rnn s = {c, op, op->srcs[0], op->srcs[1], NULL, 0, 0, 0, NULL, NULL, NULL, NULL};
  s.h = s.r->type.dims[0];
  s.gh = s.r->type.dims[1];
  s.t = s.xp->type.dims[1];
  int first_state = 2;
  if (gates == 3) s.rb = op->srcs[first_state++];
  LLVMTypeRef hty = LLVMArrayType2(e->f32, (uint64_t)s.h), uty = LLVMArrayType2(e->f32, (uint64_t)s.gh);
  s.hs = cg_entry_alloca(c, hty, "h");
  s.u = cg_entry_alloca(c, uty, "u");
  if (states == 2) s.cs = cg_entry_alloca(c, hty, "c");
  if (gates == 3 && !op->attr.reset_after) s.gs = cg_entry_alloca(c, hty, "gh");
  /* the kernel's rows: the batch's (N symbolic), or of a static result
   * one row that is every one of its dims[0] batch rows */
  int64_t per = ir_type_is_batched(&op->type) ? 1 : op->type.dims[0];
  cg_loop lr = cg_loop_begin(c, LLVMBuildMul(B, c->row0, i64c(per), ""), LLVMBuildMul(B, c->row1, i64c(per), ""), 1, "row");
  cg_loop l0 = cg_loop_begin(c, i64c(0), i64c(s.h), 1, "h0");
  LLVMValueRef si = LLVMBuildAdd(B, LLVMBuildMul(B, lr.iv, i64c(s.h), ""), l0.iv, "");
  st(&s, s.hs, l0.iv, load_f(c, op->srcs[first_state], si, 1));
  if (s.cs) st(&s, s.cs, l0.iv, load_f(c, op->srcs[first_state + 1], si, 1));
  cg_loop_end(c, &l0);
  cg_loop lt = cg_loop_begin(c, i64c(0), i64c(s.t), 1, "step");
  LLVMValueRef t = op->attr.reverse ? LLVMBuildSub(B, i64c(s.t - 1), lt.iv, "t") : lt.iv;
  step(&s, lr.iv, t, op->attr.reverse == 2 ? lt.iv : t);
  cg_loop_end(c, &lt);
  cg_loop_end(c, &lr);
}
