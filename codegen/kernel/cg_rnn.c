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
  const ir_node *op, *xp, *r, *rb, *mask; /* mask: i1 [N,T] or NULL (ir_rnn_mask) */
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

/* u[j0 .. j1) += sum_k src[k] * r[k, j] over k in order (src: h or g*h).
 * r is row-major [H, G*H], so a run of columns is a contiguous load: the
 * columns go in blocks of RNN_NV vectors of vw lanes, each block's sums
 * held in registers over the whole k loop (one load of u and one store per
 * block and step, not per k), then a scalar tail. Each output element is
 * still u[j] then one fmuladd per k in k order: the same bits as the
 * scalar loop's, on any lanes or split of the rows. */
enum { RNN_NV = 4 };

static void recurrent_product(rnn *s, LLVMValueRef src, int64_t j0, int64_t j1) {
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  int vw = e->vw > 0 ? e->vw : 1;
  int64_t bw = (int64_t)RNN_NV * vw, nb = (j1 - j0) / bw;
  if (nb > 0) {
    LLVMTypeRef vt = vec(e, vw);
    LLVMValueRef acc[RNN_NV];
    for (int v = 0; v < RNN_NV; v++) acc[v] = cg_entry_alloca(c, vt, "u.acc");
    cg_loop lb = cg_loop_begin(c, i64c(0), i64c(nb), 1, "jb");
    LLVMValueRef jb = LLVMBuildAdd(B, LLVMBuildMul(B, lb.iv, i64c(bw), ""), i64c(j0), "jb.col");
    for (int v = 0; v < RNN_NV; v++) {
      LLVMValueRef p = LLVMBuildGEP2(B, e->f32, s->u, (LLVMValueRef[]){LLVMBuildAdd(B, jb, i64c(v * vw), "")}, 1, "");
      LLVMValueRef l = LLVMBuildLoad2(B, vt, p, "");
      LLVMSetAlignment(l, 4); /* u is an f32 array: no vector alignment */
      LLVMBuildStore(B, l, acc[v]);
    }
    cg_loop lk = cg_loop_begin(c, i64c(0), i64c(s->h), 1, "k");
    LLVMValueRef hk = cg_splat(e, ld(s, src, lk.iv), vw);
    LLVMValueRef rrow = LLVMBuildAdd(B, LLVMBuildMul(B, lk.iv, i64c(s->gh), ""), jb, "r.at");
    for (int v = 0; v < RNN_NV; v++) {
      LLVMValueRef rv = load_f(c, s->r, LLVMBuildAdd(B, rrow, i64c(v * vw), ""), vw);
      LLVMBuildStore(B, cg_fmuladd(e, hk, rv, get(c, acc[v], vt)), acc[v]);
    }
    cg_loop_end(c, &lk);
    for (int v = 0; v < RNN_NV; v++) {
      LLVMValueRef p = LLVMBuildGEP2(B, e->f32, s->u, (LLVMValueRef[]){LLVMBuildAdd(B, jb, i64c(v * vw), "")}, 1, "");
      LLVMSetAlignment(LLVMBuildStore(B, get(c, acc[v], vt), p), 4);
    }
    cg_loop_end(c, &lb);
  }
  int64_t jt = j0 + nb * bw;
  if (jt == j1) return;
  cg_loop lk = cg_loop_begin(c, i64c(0), i64c(s->h), 1, "k");
  LLVMValueRef hk = ld(s, src, lk.iv);
  LLVMValueRef rrow = LLVMBuildMul(B, lk.iv, i64c(s->gh), "r.row");
  cg_loop lj = cg_loop_begin(c, i64c(jt), i64c(j1), 1, "j");
  LLVMValueRef rv = load_f(c, s->r, LLVMBuildAdd(B, rrow, lj.iv, ""), 1);
  st(s, s->u, lj.iv, cg_fmuladd(e, hk, rv, ld(s, s->u, lj.iv)));
  cg_loop_end(c, &lj);
  cg_loop_end(c, &lk);
}

/* Whether step t of batch row `row` is taken (the mask true there), or NULL without a mask. */
static LLVMValueRef taken(rnn *s, LLVMValueRef row, LLVMValueRef t) {
  if (!s->mask) return NULL;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  LLVMValueRef i = LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(s->t), ""), t, "mask.at");
  return LLVMBuildICmp(B, LLVMIntNE, load_int(c, s->mask, i), i64c(0), "taken");
}

/* v where the step is taken, else `skip` (the state carried over, or a zero gradient) */
static LLVMValueRef or_skip(cg_emitter *e, LLVMValueRef keep, LLVMValueRef v, LLVMValueRef skip) {
  return keep ? LLVMBuildSelect(B, keep, v, skip, "masked") : v;
}

static LLVMValueRef sigm(cg_emitter *e, LLVMValueRef x) { return cg_emit_unary(e, IR_OP_SIGMOID, x, "sigmoid"); }
static LLVMValueRef tanh_(cg_emitter *e, LLVMValueRef x) { return cg_emit_unary(e, IR_OP_TANH, x, "tanh"); }

/* One step of batch row `row` reading time t: the state in s->hs (and
 * s->cs) becomes the next one, stored to y at time yt (t, or the step's
 * index with {reverse}=2); where the mask skips the step, the state stays
 * (a select at the update) and y gets it. */
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
  LLVMValueRef keep = taken(s, row, t);
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
  hn = or_skip(e, keep, cg_emit_round_to(e, hn, dt, "h"), ld(s, s->hs, j));
  if (cn) cn = or_skip(e, keep, cn, ld(s, s->cs, j));
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
  rnn s = {c, op, op->srcs[0], op->srcs[1], NULL, ir_rnn_mask(op), 0, 0, 0, NULL, NULL, NULL, NULL};
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

/* ---- backpropagation through time: simple_rnn_grad, gru_grad, lstm_grad
 * (ir_ops.def gives the result's layout). Per batch row the steps run in
 * the reverse of the forward's order; each reloads the state before it
 * (y's at the previous step, or the initial state), recomputes its gates
 * as step() does, and carries dh (and dc) back in f32 scratch. ---- */

typedef struct rnn_bwd {
  rnn f;                  /* the forward's view: xp, r, rb, sizes, scratch hs (h_{t-1}), cs (c_{t-1}), u, gs */
  const ir_node *y, *dy, *h0, *c0;
  int64_t w;              /* the result's width per step */
  LLVMValueRef dh, dc, du, dn; /* f32 scratch: dh [H], dc [H], du [G*H], the next dh [H] */
} rnn_bwd;

/* y[row, yt, which, j] (which: 0 h, 1 c; lstm's y is [N,T,2,H]) */
static LLVMValueRef y_at(rnn_bwd *b, const ir_node *y, LLVMValueRef row, LLVMValueRef yt, int which, LLVMValueRef j) {
  cg_kctx *c = b->f.c;
  cg_emitter *e = c->e;
  int64_t per = b->f.cs ? 2 * b->f.h : b->f.h;
  LLVMValueRef base = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(b->f.t), ""), yt, ""), i64c(per), "");
  return load_f(c, y, LLVMBuildAdd(B, base, LLVMBuildAdd(B, j, i64c(which * b->f.h), ""), ""), 1);
}

static LLVMValueRef one_minus_sq(cg_emitter *e, LLVMValueRef v) {
  return LLVMBuildFSub(B, F(1.0), LLVMBuildFMul(B, v, v, ""), "");
}

static LLVMValueRef dsigm(cg_emitter *e, LLVMValueRef s) { /* s (1 - s) */
  return LLVMBuildFMul(B, s, LLVMBuildFSub(B, F(1.0), s, ""), "");
}

/* dn[k] += sum_j du[j] r[k, j] over j in [j0, j1): the gradient through h r */
static void transposed_product(rnn_bwd *b, LLVMValueRef dst, int64_t j0, int64_t j1) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  cg_loop lk = cg_loop_begin(c, i64c(0), i64c(s->h), 1, "k");
  LLVMValueRef rrow = LLVMBuildMul(B, lk.iv, i64c(s->gh), "r.row");
  LLVMValueRef acc = cg_entry_alloca(c, e->f32, "dot");
  LLVMBuildStore(B, ld(s, dst, lk.iv), acc);
  cg_loop lj = cg_loop_begin(c, i64c(j0), i64c(j1), 1, "j");
  LLVMValueRef rv = load_f(c, s->r, LLVMBuildAdd(B, rrow, lj.iv, ""), 1);
  LLVMBuildStore(B, cg_fmuladd(e, ld(s, b->du, lj.iv), rv, LLVMBuildLoad2(B, e->f32, acc, "")), acc);
  cg_loop_end(c, &lj);
  st(s, dst, lk.iv, LLVMBuildLoad2(B, e->f32, acc, ""));
  cg_loop_end(c, &lk);
}

static void bwd_step(rnn_bwd *b, LLVMValueRef row, LLVMValueRef step) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  const ir_node *op = s->op;
  int reverse = (int)op->attr.reverse;
  int64_t h = s->h, tl = s->t;
  LLVMValueRef t = reverse ? LLVMBuildSub(B, i64c(tl - 1), step, "t") : step;
  LLVMValueRef yt = reverse == 2 ? step : t;
  LLVMValueRef first = LLVMBuildICmp(B, LLVMIntEQ, step, i64c(0), "first");
  LLVMValueRef ob = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(tl), ""), t, ""), i64c(b->w), "out.base");
  /* the state before the step: y at the previous step (clamped in range), or the initial one */
  LLVMValueRef yp = reverse == 2 ? LLVMBuildSub(B, step, i64c(1), "") : reverse ? LLVMBuildAdd(B, t, i64c(1), "")
                                                                                : LLVMBuildSub(B, t, i64c(1), "");
  yp = LLVMBuildSelect(B, first, i64c(0), yp, "y.prev");
  cg_loop lp = cg_loop_begin(c, i64c(0), i64c(h), 1, "prev");
  LLVMValueRef si = LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(h), ""), lp.iv, "");
  st(s, s->hs, lp.iv, LLVMBuildSelect(B, first, load_f(c, b->h0, si, 1), y_at(b, b->y, row, yp, 0, lp.iv), ""));
  if (s->cs) st(s, s->cs, lp.iv, LLVMBuildSelect(B, first, load_f(c, b->c0, si, 1), y_at(b, b->y, row, yp, 1, lp.iv), ""));
  st(s, b->dn, lp.iv, F(0.0));
  cg_loop_end(c, &lp);
  /* the forward's u (and g * h with gru's reset gate before) */
  LLVMValueRef xbase = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(tl), ""), t, ""), i64c(s->gh), "xp.base");
  bool gru = s->rb != NULL, gru_before = gru && !op->attr.reset_after;
  cg_loop l0 = cg_loop_begin(c, i64c(0), i64c(s->gh), 1, "u0");
  st(s, s->u, l0.iv, gru ? load_f(c, s->rb, l0.iv, 1) : load_f(c, s->xp, LLVMBuildAdd(B, xbase, l0.iv, ""), 1));
  cg_loop_end(c, &l0);
  recurrent_product(s, s->hs, 0, gru_before ? 2 * h : s->gh);
#define U(g) ld(s, s->u, LLVMBuildAdd(B, j, i64c((g) * h), ""))
#define XP(g) load_f(c, s->xp, LLVMBuildAdd(B, xbase, LLVMBuildAdd(B, j, i64c((g) * h), ""), ""), 1)
#define SETDU(g, v) st(s, b->du, LLVMBuildAdd(B, j, i64c((g) * h), ""), or_skip(e, keep, (v), zero))
  if (gru_before) {
    cg_loop lg = cg_loop_begin(c, i64c(0), i64c(h), 1, "gh");
    LLVMValueRef j = lg.iv;
    st(s, s->gs, j, LLVMBuildFMul(B, sigm(e, LLVMBuildFAdd(B, XP(1), U(1), "")), ld(s, s->hs, j), ""));
    cg_loop_end(c, &lg);
    recurrent_product(s, s->gs, 2 * h, 3 * h);
  }
  /* per unit: the gates' gradients into du, the direct part of the next dh into dn; a step the
   * mask skips passes dh (and dc) on whole and gives xp and the product no gradient */
  LLVMValueRef keep = taken(s, row, t), zero = F(0.0);
  cg_loop lj = cg_loop_begin(c, i64c(0), i64c(h), 1, "gate");
  LLVMValueRef j = lj.iv;
  LLVMValueRef dht = LLVMBuildFAdd(B, ld(s, b->dh, j), y_at(b, b->dy, row, yt, 0, j), "dh.t");
  if (s->cs) { /* lstm: i, f, c, o */
    LLVMValueRef ig = sigm(e, U(0)), fg = sigm(e, U(1)), cc = tanh_(e, U(2)), og = sigm(e, U(3));
    LLVMValueRef tc = tanh_(e, y_at(b, b->y, row, yt, 1, j));
    LLVMValueRef dct = LLVMBuildFAdd(B, LLVMBuildFAdd(B, ld(s, b->dc, j), y_at(b, b->dy, row, yt, 1, j), ""),
                                     LLVMBuildFMul(B, LLVMBuildFMul(B, dht, og, ""), one_minus_sq(e, tc), ""), "dc.t");
    SETDU(0, LLVMBuildFMul(B, LLVMBuildFMul(B, dct, cc, ""), dsigm(e, ig), ""));
    SETDU(1, LLVMBuildFMul(B, LLVMBuildFMul(B, dct, ld(s, s->cs, j), ""), dsigm(e, fg), ""));
    SETDU(2, LLVMBuildFMul(B, LLVMBuildFMul(B, dct, ig, ""), one_minus_sq(e, cc), ""));
    SETDU(3, LLVMBuildFMul(B, LLVMBuildFMul(B, dht, tc, ""), dsigm(e, og), ""));
    LLVMValueRef dc_skip = keep ? LLVMBuildFAdd(B, ld(s, b->dc, j), y_at(b, b->dy, row, yt, 1, j), "") : NULL;
    st(s, b->dc, j, or_skip(e, keep, LLVMBuildFMul(B, dct, fg, ""), dc_skip));
  } else if (gru) { /* z, r, h */
    LLVMValueRef z = sigm(e, LLVMBuildFAdd(B, XP(0), U(0), ""));
    LLVMValueRef g = sigm(e, LLVMBuildFAdd(B, XP(1), U(1), ""));
    LLVMValueRef pre = gru_before ? U(2) : LLVMBuildFMul(B, g, U(2), "");
    LLVMValueRef cand = tanh_(e, LLVMBuildFAdd(B, XP(2), pre, ""));
    LLVMValueRef hp = ld(s, s->hs, j);
    SETDU(0, LLVMBuildFMul(B, LLVMBuildFMul(B, dht, LLVMBuildFSub(B, hp, cand, ""), ""), dsigm(e, z), ""));
    LLVMValueRef dpre = LLVMBuildFMul(B, LLVMBuildFMul(B, dht, LLVMBuildFSub(B, F(1.0), z, ""), ""),
                                      one_minus_sq(e, cand), "dpre");
    /* reset after: xp_h's gradient dpre, u_h's dpre g, g's dpre u_h; before: both dpre, g's below */
    store_f(c, op, LLVMBuildAdd(B, ob, LLVMBuildAdd(B, j, i64c(2 * h), ""), ""), or_skip(e, keep, dpre, zero), 1);
    SETDU(2, gru_before ? dpre : LLVMBuildFMul(B, dpre, g, ""));
    if (!gru_before) SETDU(1, LLVMBuildFMul(B, LLVMBuildFMul(B, dpre, U(2), ""), dsigm(e, g), ""));
    st(s, b->dn, j, or_skip(e, keep, LLVMBuildFMul(B, dht, z, ""), dht));
  } else {
    SETDU(0, LLVMBuildFMul(B, dht, one_minus_sq(e, tanh_(e, U(0))), ""));
  }
  if (keep && !gru) st(s, b->dn, j, or_skip(e, keep, zero, dht)); /* du r^T adds 0 where skipped */
  cg_loop_end(c, &lj);
  if (gru_before) { /* d(g h) = du_h r_h^T: g's gradient and h_{t-1}'s through g h */
    LLVMValueRef dgh = s->gs; /* g h is stored to the result below first */
    cg_loop lq = cg_loop_begin(c, i64c(0), i64c(h), 1, "p2");
    store_f(c, op, LLVMBuildAdd(B, ob, LLVMBuildAdd(B, lq.iv, i64c(2 * s->gh + h), ""), ""), ld(s, s->gs, lq.iv), 1);
    st(s, dgh, lq.iv, F(0.0));
    cg_loop_end(c, &lq);
    transposed_product(b, dgh, 2 * h, 3 * h); /* (k over r's rows: dgh[k] = sum_j du_h[j] r[k, 2H + j]) */
    cg_loop lg = cg_loop_begin(c, i64c(0), i64c(h), 1, "dg");
    j = lg.iv;
    LLVMValueRef g = sigm(e, LLVMBuildFAdd(B, XP(1), U(1), ""));
    LLVMValueRef d = ld(s, dgh, j);
    SETDU(1, LLVMBuildFMul(B, LLVMBuildFMul(B, d, ld(s, s->hs, j), ""), dsigm(e, g), ""));
    st(s, b->dn, j, LLVMBuildFAdd(B, ld(s, b->dn, j), LLVMBuildFMul(B, d, g, ""), ""));
    cg_loop_end(c, &lg);
  }
#undef U
#undef XP
#undef SETDU
  /* the result at t: dxp, du, p1, p2; then dh_{t-1} = dn + du r^T (gru before: over z and r) */
  cg_loop lo = cg_loop_begin(c, i64c(0), i64c(s->gh), 1, "out");
  LLVMValueRef v = ld(s, b->du, lo.iv);
  if (!gru) store_f(c, op, LLVMBuildAdd(B, ob, lo.iv, ""), v, 1);
  store_f(c, op, LLVMBuildAdd(B, ob, LLVMBuildAdd(B, lo.iv, i64c(s->gh), ""), ""), v, 1);
  cg_loop_end(c, &lo);
  if (gru) { /* dxp: z and r as du; h was stored above */
    cg_loop lz = cg_loop_begin(c, i64c(0), i64c(2 * h), 1, "out.zr");
    store_f(c, op, LLVMBuildAdd(B, ob, lz.iv, ""), ld(s, b->du, lz.iv), 1);
    cg_loop_end(c, &lz);
  }
  cg_loop lq = cg_loop_begin(c, i64c(0), i64c(h), 1, "p");
  store_f(c, op, LLVMBuildAdd(B, ob, LLVMBuildAdd(B, lq.iv, i64c(2 * s->gh), ""), ""), ld(s, s->hs, lq.iv), 1);
  if (!gru_before)
    store_f(c, op, LLVMBuildAdd(B, ob, LLVMBuildAdd(B, lq.iv, i64c(2 * s->gh + h), ""), ""), ld(s, s->hs, lq.iv), 1);
  cg_loop_end(c, &lq);
  transposed_product(b, b->dn, 0, gru_before ? 2 * h : s->gh);
  cg_loop ld_ = cg_loop_begin(c, i64c(0), i64c(h), 1, "dh.next");
  st(s, b->dh, ld_.iv, ld(s, b->dn, ld_.iv));
  cg_loop_end(c, &ld_);
}

void cg_train_rnn_grad(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  int gates = ir_rnn_gates(op->op), states = ir_rnn_states(op->op);
  CASTOR_ASSERT(ir_rnn_forward(op->op) != IR_OP_COUNT);
  rnn_bwd b = {{c, op, op->srcs[0], op->srcs[1], NULL, ir_rnn_mask(op), 0, 0, 0, NULL, NULL, NULL, NULL}, NULL, NULL,
               NULL, NULL, 0,
               NULL, NULL, NULL, NULL};
  rnn *s = &b.f;
  s->h = s->r->type.dims[0];
  s->gh = s->r->type.dims[1];
  s->t = s->xp->type.dims[1];
  int k = 2;
  if (gates == 3) s->rb = op->srcs[k++];
  b.h0 = op->srcs[k++];
  if (states == 2) b.c0 = op->srcs[k++];
  b.y = op->srcs[k++];
  b.dy = op->srcs[k++];
  b.w = ir_rnn_grad_width(op->op, s->h);
  LLVMTypeRef hty = LLVMArrayType2(e->f32, (uint64_t)s->h), uty = LLVMArrayType2(e->f32, (uint64_t)s->gh);
  s->hs = cg_entry_alloca(c, hty, "h.prev");
  s->u = cg_entry_alloca(c, uty, "u");
  s->gs = cg_entry_alloca(c, hty, "gh");
  if (states == 2) s->cs = cg_entry_alloca(c, hty, "c.prev");
  b.dh = cg_entry_alloca(c, hty, "dh");
  b.dc = cg_entry_alloca(c, hty, "dc");
  b.du = cg_entry_alloca(c, uty, "du");
  b.dn = cg_entry_alloca(c, hty, "dh.next");
  int64_t per = ir_type_is_batched(&op->type) ? 1 : op->type.dims[0];
  cg_loop lr = cg_loop_begin(c, LLVMBuildMul(B, c->row0, i64c(per), ""), LLVMBuildMul(B, c->row1, i64c(per), ""), 1, "row");
  cg_loop l0 = cg_loop_begin(c, i64c(0), i64c(s->h), 1, "dh0");
  st(s, b.dh, l0.iv, F(0.0));
  st(s, b.dc, l0.iv, F(0.0));
  cg_loop_end(c, &l0);
  cg_loop lt = cg_loop_begin(c, i64c(0), i64c(s->t), 1, "back");
  bwd_step(&b, lr.iv, LLVMBuildSub(B, i64c(s->t - 1), lt.iv, "step"));
  cg_loop_end(c, &lt);
  cg_loop_end(c, &lr);
}
