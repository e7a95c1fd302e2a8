/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_rnn.c: the recurrent ops' kernel in the kit (simple_rnn, gru, lstm;
 * ir_ops.def gives each formula): a scan over time over a block of batch
 * rows at a time (the kernel's row range in blocks of nr rows, then one
 * row at a time for what is left), the recurrent kernel r resident (read
 * in place, row k of r once per step and block: each load of r serves the
 * block's nr rows), the block's state in f32 scratch on the stack. The
 * input projection xp = x W + b of every step is the matmul before the op
 * (one GEMM over N*T rows); this kernel adds h r per step and applies the
 * gates. Reached by kernel class: a row-wise op without a line formula is
 * a row kernel of cg_train.c's table, on every target.
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
  /* f32 scratch, per row of a block: h [H], c [H], u [G*H], g*h [H]
   * (row b's at b H, b G*H) */
  LLVMValueRef hs, cs, u, gs;
  int64_t yw;   /* y's floats per step: H, lstm 2H, lstm_train 6H (h, c, then the gates) */
  bool reserve; /* y holds each step's activated gates (lstm_train: its forward writes them, lstm_grad reads them;
                 * an f32 simple_rnn's y is its tanh(u)) */
} rnn;

/* The batch rows one pass of r serves: the block's nr x nv vector sums
 * stay in registers over the k loop (4 x 4 of AVX-512's 32 registers, 2 x 4
 * of AVX2's 16), the block's scratch at most RNN_BLOCK_BYTES; one row
 * where vectors are scalars (the GPU's one row per thread). The forward
 * first takes wide blocks, 12 rows x 2 vectors on AVX-512 (24 sums): each
 * vector of r loaded from L2 serves 12 rows, not 4, which at batch 64 made
 * the scan bound by r's L2 traffic (16 bytes of r per FMA at 4 rows, 5.3 at
 * 12; MLAS's SGEMM kernel, ORT's LSTM's, takes 12 rows too); then blocks of
 * 4, then single rows. The backward keeps 4 (its transposed product holds
 * RNN_KB x nr sums). */
enum { RNN_MAX_ROWS = 12, RNN_WIDE_ROWS = 12, RNN_BLOCK_BYTES = 64 << 10 };

static int rnn_block_rows(const cg_emitter *e, int64_t gh, bool wide) {
  int nr = e->vw >= 16 ? (wide ? RNN_WIDE_ROWS : 4) : e->vw >= 8 ? 2 : 1;
  while (nr > 1 && (int64_t)nr * gh * 4 > RNN_BLOCK_BYTES) nr /= 2;
  return nr;
}

/* Row b's part of a block's scratch of `width` floats per row. */
static LLVMValueRef row_of(rnn *s, LLVMValueRef a, LLVMValueRef b, int64_t width) {
  cg_emitter *e = s->c->e;
  LLVMValueRef off = LLVMBuildMul(B, b, i64c(width), "");
  return LLVMBuildGEP2(B, e->f32, a, &off, 1, "");
}

static LLVMValueRef at(rnn *s, LLVMValueRef a, LLVMValueRef j) {
  cg_emitter *e = s->c->e;
  return LLVMBuildGEP2(B, e->f32, a, &j, 1, "");
}

static LLVMValueRef ld(rnn *s, LLVMValueRef a, LLVMValueRef j) {
  return LLVMBuildLoad2(s->c->e->b, s->c->e->f32, at(s, a, j), "");
}

static void st(rnn *s, LLVMValueRef a, LLVMValueRef j, LLVMValueRef v) { LLVMBuildStore(s->c->e->b, v, at(s, a, j)); }

/* xp[row, t, 0] */
static LLVMValueRef xp_base(rnn *s, LLVMValueRef row, LLVMValueRef t) {
  cg_emitter *e = s->c->e;
  return LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(s->t), ""), t, ""), i64c(s->gh), "xp.base");
}

/* What u[row, j] starts from: gru's recurrent bias rb[j], else the input
 * projection xp[row, t, j] (lanes of them). */
static LLVMValueRef u_init(rnn *s, LLVMValueRef row, LLVMValueRef t, LLVMValueRef j, int lanes) {
  cg_emitter *e = s->c->e;
  if (s->rb) return load_f(s->c, s->rb, j, lanes);
  return load_f(s->c, s->xp, LLVMBuildAdd(B, xp_base(s, row, t), j, ""), lanes);
}

/* u[b, j0 .. j1) = u_init + sum_k src[b, k] * r[k, j] over k in order, for
 * the block's rows b < nr from row0 at time t (src: h or g*h). r is
 * row-major [H, G*H], so a run of columns is a contiguous load: the columns
 * go in blocks of nv vectors of vw lanes, each block's nr x nv sums held in
 * registers over the whole k loop (started from u_init's vectors, stored to
 * u once per block and step; one load of r per k for all nr rows), then
 * single vectors, then a scalar tail. Each output element is still u_init
 * then one fmuladd per k in k order: the same bits as the scalar loop's, on
 * any lanes, block or split of the rows. */
enum { RNN_NV = 4 };

/* Columns [j0, j0 + nb * nv * vw) in nb blocks of nv vectors (see below). */
static void product_blocks(rnn *s, LLVMValueRef src, int nr, LLVMValueRef row0, LLVMValueRef t, int64_t j0, int64_t nb,
                           int nv) {
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  int vw = e->vw > 0 ? e->vw : 1;
  int64_t bw = (int64_t)nv * vw;
  LLVMTypeRef vt = vec(e, vw);
  LLVMValueRef acc[RNN_MAX_ROWS][RNN_NV], up[RNN_MAX_ROWS][RNN_NV];
  CASTOR_ASSERT(nv >= 1 && nv <= RNN_NV);
  for (int b = 0; b < nr; b++)
    for (int v = 0; v < nv; v++) acc[b][v] = cg_entry_alloca(c, vt, "u.acc");
  cg_loop lb = cg_loop_begin(c, i64c(0), i64c(nb), 1, "jb");
  LLVMValueRef jb = LLVMBuildAdd(B, LLVMBuildMul(B, lb.iv, i64c(bw), ""), i64c(j0), "jb.col");
  for (int b = 0; b < nr; b++) {
    LLVMValueRef row = LLVMBuildAdd(B, row0, i64c(b), "row");
    for (int v = 0; v < nv; v++) {
      up[b][v] = at(s, s->u, LLVMBuildAdd(B, jb, i64c(b * s->gh + v * vw), ""));
      LLVMBuildStore(B, u_init(s, row, t, LLVMBuildAdd(B, jb, i64c(v * vw), ""), vw), acc[b][v]);
    }
  }
  cg_loop lk = cg_loop_begin(c, i64c(0), i64c(s->h), 1, "k");
  LLVMValueRef rrow = LLVMBuildAdd(B, LLVMBuildMul(B, lk.iv, i64c(s->gh), ""), jb, "r.at"), rv[RNN_NV];
  for (int v = 0; v < nv; v++) rv[v] = load_f(c, s->r, LLVMBuildAdd(B, rrow, i64c(v * vw), ""), vw);
  for (int b = 0; b < nr; b++) {
    LLVMValueRef hk = cg_splat(e, ld(s, src, LLVMBuildAdd(B, lk.iv, i64c(b * s->h), "")), vw);
    for (int v = 0; v < nv; v++) LLVMBuildStore(B, cg_fmuladd(e, hk, rv[v], get(c, acc[b][v], vt)), acc[b][v]);
  }
  cg_loop_end(c, &lk);
  for (int b = 0; b < nr; b++)
    for (int v = 0; v < nv; v++) LLVMSetAlignment(LLVMBuildStore(B, get(c, acc[b][v], vt), up[b][v]), 4);
  cg_loop_end(c, &lb);
}

static void recurrent_product(rnn *s, LLVMValueRef src, int nr, LLVMValueRef row0, LLVMValueRef t, int64_t j0,
                              int64_t j1) {
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  int vw = e->vw > 0 ? e->vw : 1;
  CASTOR_ASSERT(nr >= 1 && nr <= RNN_MAX_ROWS);
  /* (8 vectors a block for one row, 8 independent sums, measured no faster
   * at batch 1: r's 256 KiB per step from L2 bound it, not the latency);
   * wide blocks of rows take 2 vectors (nr x nv sums in registers) */
  int nv = nr > 4 ? 2 : RNN_NV;
  int64_t nb = (j1 - j0) / (nv * vw);
  if (nb > 0) product_blocks(s, src, nr, row0, t, j0, nb, nv);
  j0 += nb * nv * vw;
  int64_t n1 = (j1 - j0) / vw;
  if (vw > 1 && n1 > 0) product_blocks(s, src, nr, row0, t, j0, n1, 1);
  int64_t jt = vw > 1 ? j0 + n1 * vw : j0;
  if (jt == j1) return;
  for (int b = 0; b < nr; b++) {
    cg_loop l0 = cg_loop_begin(c, i64c(jt), i64c(j1), 1, "u0");
    st(s, s->u, LLVMBuildAdd(B, l0.iv, i64c(b * s->gh), ""), u_init(s, LLVMBuildAdd(B, row0, i64c(b), "row"), t, l0.iv, 1));
    cg_loop_end(c, &l0);
    cg_loop lk = cg_loop_begin(c, i64c(0), i64c(s->h), 1, "k");
    LLVMValueRef hk = ld(s, src, LLVMBuildAdd(B, lk.iv, i64c(b * s->h), ""));
    LLVMValueRef rrow = LLVMBuildMul(B, lk.iv, i64c(s->gh), "r.row");
    cg_loop lj = cg_loop_begin(c, i64c(jt), i64c(j1), 1, "j");
    LLVMValueRef rv = load_f(c, s->r, LLVMBuildAdd(B, rrow, lj.iv, ""), 1);
    LLVMValueRef uj = LLVMBuildAdd(B, lj.iv, i64c(b * s->gh), "");
    st(s, s->u, uj, cg_fmuladd(e, hk, rv, ld(s, s->u, uj)));
    cg_loop_end(c, &lj);
    cg_loop_end(c, &lk);
  }
}

static LLVMValueRef sigm(cg_emitter *e, LLVMValueRef x) { return cg_emit_gate_sigmoid(e, x, "sigmoid"); }
static LLVMValueRef tanh_(cg_emitter *e, LLVMValueRef x) { return cg_emit_gate_tanh(e, x, "tanh"); }


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

/* Row b of a block as a one-row view: its part of the block's scratch. */
static rnn row_view(rnn *s, LLVMValueRef b) {
  rnn v = *s;
  v.hs = row_of(s, s->hs, b, s->h);
  v.u = row_of(s, s->u, b, s->gh);
  if (s->cs) v.cs = row_of(s, s->cs, b, s->h);
  if (s->gs) v.gs = row_of(s, s->gs, b, s->h);
  return v;
}

/* lanes floats of scratch a from j (alignment 4: f32 arrays) */
static LLVMValueRef ldv(rnn *s, LLVMValueRef a, LLVMValueRef j, int lanes) {
  cg_emitter *e = s->c->e;
  LLVMValueRef l = LLVMBuildLoad2(B, vec(e, lanes), at(s, a, j), "");
  LLVMSetAlignment(l, 4);
  return l;
}

static void stv(rnn *s, LLVMValueRef a, LLVMValueRef j, LLVMValueRef v) {
  LLVMSetAlignment(LLVMBuildStore(s->c->e->b, v, at(s, a, j)), 4);
}

/* The gates of one row (s a row view) once u holds its products, units
 * [j0, j1) in vectors of `lanes`: the state in s->hs (and s->cs) becomes
 * the next one, stored to y at time yt; where the mask skips the step the
 * state stays (a select at the update) and y gets it. Element-wise, so
 * any lanes give the same bits. */
static void gates(rnn *s, LLVMValueRef row, LLVMValueRef t, LLVMValueRef yt, int64_t j0, int64_t j1, int lanes) {
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  const ir_node *op = s->op;
  ir_dtype dt = op->type.dtype;
  int64_t h = s->h;
  if (j1 <= j0) return;
  LLVMValueRef xbase = xp_base(s, row, t), one = cg_const(e, vec(e, lanes), 1.0);
  bool gru = s->rb != NULL, gru_before = gru && !op->attr.reset_after;
  LLVMValueRef ybase = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(s->t), ""), yt, ""),
                                    i64c(s->yw), "y.base");
  LLVMValueRef keep = taken(s, row, t);
  cg_loop lj = cg_loop_begin(c, i64c(j0), i64c(j1), lanes, "gate");
  LLVMValueRef j = lj.iv, hn, cn = NULL;
#define U(g) ldv(s, s->u, LLVMBuildAdd(B, j, i64c((g) * h), ""), lanes)
#define XP(g) load_f(c, s->xp, LLVMBuildAdd(B, xbase, LLVMBuildAdd(B, j, i64c((g) * h), ""), ""), lanes)
  if (s->cs) { /* lstm: i, f, c, o */
    LLVMValueRef ig = sigm(e, U(0)), fg = sigm(e, U(1)), cc = tanh_(e, U(2)), og = sigm(e, U(3));
    cn = cg_emit_round_to(
        e, LLVMBuildFAdd(B, LLVMBuildFMul(B, fg, ldv(s, s->cs, j, lanes), ""), LLVMBuildFMul(B, ig, cc, ""), ""), dt, "c");
    hn = LLVMBuildFMul(B, og, tanh_(e, cn), "");
    if (s->reserve) { /* lstm_train: the gates after h and c, for lstm_grad */
      LLVMValueRef gv[4] = {ig, fg, cc, og};
      for (int g = 0; g < 4; g++) store_f(c, op, LLVMBuildAdd(B, ybase, LLVMBuildAdd(B, j, i64c((2 + g) * h), ""), ""), gv[g], lanes);
    }
  } else if (gru) { /* z, r, h */
    LLVMValueRef z = sigm(e, LLVMBuildFAdd(B, XP(0), U(0), ""));
    LLVMValueRef pre = gru_before ? U(2) : LLVMBuildFMul(B, sigm(e, LLVMBuildFAdd(B, XP(1), U(1), "")), U(2), "");
    LLVMValueRef cand = tanh_(e, LLVMBuildFAdd(B, XP(2), pre, ""));
    LLVMValueRef hp = ldv(s, s->hs, j, lanes);
    hn = LLVMBuildFAdd(B, LLVMBuildFMul(B, z, hp, ""), LLVMBuildFMul(B, LLVMBuildFSub(B, one, z, ""), cand, ""), "");
  } else {
    hn = tanh_(e, U(0));
  }
#undef U
#undef XP
  hn = or_skip(e, keep, cg_emit_round_to(e, hn, dt, "h"), ldv(s, s->hs, j, lanes));
  if (cn) cn = or_skip(e, keep, cn, ldv(s, s->cs, j, lanes));
  stv(s, s->hs, j, hn);
  store_f(c, op, LLVMBuildAdd(B, ybase, j, ""), hn, lanes);
  if (cn) {
    stv(s, s->cs, j, cn);
    store_f(c, op, LLVMBuildAdd(B, ybase, LLVMBuildAdd(B, j, i64c(h), ""), ""), cn, lanes);
  }
  cg_loop_end(c, &lj);
}

/* One step of the nr batch rows from row0 reading time t: each row's state
 * becomes the next one, stored to y at time yt (t, or the step's index with
 * {reverse}=2). */
static void step(rnn *s, LLVMValueRef row0, int nr, LLVMValueRef t, LLVMValueRef yt) {
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  int64_t h = s->h;
  bool gru = s->rb != NULL, gru_before = gru && !s->op->attr.reset_after;
  /* u = (gru: rb; else xp[row, t]) + h r, over the gates whose product is of h */
  recurrent_product(s, s->hs, nr, row0, t, 0, gru_before ? 2 * h : s->gh);
  if (gru_before) { /* (g * h) r_h, g the reset gate */
    cg_loop lg0 = cg_loop_begin(c, i64c(0), i64c(nr), 1, "blk.gh");
    rnn v = row_view(s, lg0.iv);
    LLVMValueRef xbase = xp_base(s, LLVMBuildAdd(B, row0, lg0.iv, "row"), t);
    cg_loop lg = cg_loop_begin(c, i64c(0), i64c(h), 1, "gh");
    LLVMValueRef xr = load_f(c, s->xp, LLVMBuildAdd(B, xbase, LLVMBuildAdd(B, lg.iv, i64c(h), ""), ""), 1);
    LLVMValueRef g = sigm(e, LLVMBuildFAdd(B, xr, ld(&v, v.u, LLVMBuildAdd(B, lg.iv, i64c(h), "")), ""));
    st(&v, v.gs, lg.iv, LLVMBuildFMul(B, g, ld(&v, v.hs, lg.iv), ""));
    cg_loop_end(c, &lg);
    cg_loop_end(c, &lg0);
    recurrent_product(s, s->gs, nr, row0, t, 2 * h, 3 * h);
  }
  cg_loop lg = cg_loop_begin(c, i64c(0), i64c(nr), 1, "blk.gate");
  rnn v = row_view(s, lg.iv);
  LLVMValueRef row = LLVMBuildAdd(B, row0, lg.iv, "row");
  int vw = e->vw > 0 ? e->vw : 1;
  int64_t hv = h / vw * vw;
  gates(&v, row, t, yt, 0, hv, vw);
  gates(&v, row, t, yt, hv, h, 1);
  cg_loop_end(c, &lg);
}

/* Rows [lo, hi) in blocks of nr (while nr remain): the initial state, then
 * every step. Returns the first row not scanned (hi when nr is 1). */
static LLVMValueRef scan_rows(rnn *s, LLVMValueRef lo, LLVMValueRef hi, int nr, int first_state) {
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  const ir_node *op = s->op;
  cg_loop lr = cg_loop_begin(c, lo, hi, nr, nr > 1 ? "rows" : "row");
  cg_loop l0 = cg_loop_begin(c, i64c(0), i64c(nr * s->h), 1, "h0");
  LLVMValueRef si = LLVMBuildAdd(B, LLVMBuildMul(B, lr.iv, i64c(s->h), ""), l0.iv, "");
  st(s, s->hs, l0.iv, load_f(c, op->srcs[first_state], si, 1));
  if (s->cs) st(s, s->cs, l0.iv, load_f(c, op->srcs[first_state + 1], si, 1));
  cg_loop_end(c, &l0);
  cg_loop lt = cg_loop_begin(c, i64c(0), i64c(s->t), 1, "step");
  LLVMValueRef t = op->attr.reverse ? LLVMBuildSub(B, i64c(s->t - 1), lt.iv, "t") : lt.iv;
  step(s, lr.iv, nr, t, op->attr.reverse == 2 ? lt.iv : t);
  cg_loop_end(c, &lt);
  cg_loop_end(c, &lr);
  return lr.iv; /* the header's value on exit: lo + a multiple of nr, iv + nr > hi */
}

void cg_train_rnn(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  int gates_n = ir_rnn_gates(op->op), states = ir_rnn_states(op->op);
  CASTOR_ASSERT(gates_n > 0);
  rnn s = {c, op, op->srcs[0], op->srcs[1], NULL, ir_rnn_mask(op), 0, 0, 0, NULL, NULL, NULL, NULL, 0, false};
  s.h = s.r->type.dims[0];
  s.gh = s.r->type.dims[1];
  s.t = s.xp->type.dims[1];
  s.reserve = ir_rnn_reserve(op->op);
  s.yw = (states == 2 ? 2 * s.h : s.h) + (s.reserve ? s.gh : 0);
  int first_state = 2;
  if (gates_n == 3) s.rb = op->srcs[first_state++];
  int nr = rnn_block_rows(e, s.gh, true), nr4 = rnn_block_rows(e, s.gh, false);
  LLVMTypeRef hty = LLVMArrayType2(e->f32, (uint64_t)(nr * s.h)), uty = LLVMArrayType2(e->f32, (uint64_t)(nr * s.gh));
  s.hs = cg_entry_alloca(c, hty, "h");
  s.u = cg_entry_alloca(c, uty, "u");
  if (states == 2) s.cs = cg_entry_alloca(c, hty, "c");
  if (gates_n == 3 && !op->attr.reset_after) s.gs = cg_entry_alloca(c, hty, "gh");
  int64_t per = cg_launch_rows(c, op);
  LLVMValueRef lo = LLVMBuildMul(B, c->row0, i64c(per), ""), hi = LLVMBuildMul(B, c->row1, i64c(per), "");
  if (nr > nr4) lo = scan_rows(&s, lo, hi, nr, first_state);
  if (nr4 > 1) lo = scan_rows(&s, lo, hi, nr4, first_state);
  scan_rows(&s, lo, hi, 1, first_state);
}

/* ---- backpropagation through time: simple_rnn_grad, gru_grad, lstm_grad
 * (ir_ops.def gives the result's layout). Per batch row the steps run in
 * the reverse of the forward's order; each reloads the state before it
 * (y's at the previous step, or the initial state), recomputes its gates
 * as step() does (lstm_grad of lstm_train's y, and an f32 simple_rnn_grad,
 * whose y's h_t is tanh(u): reads them from y, with no recurrent product),
 * and carries dh (and dc) back in f32 scratch. ---- */

typedef struct rnn_bwd {
  rnn f;                  /* the forward's view: xp, r, rb, sizes, scratch hs (h_{t-1}), cs (c_{t-1}), u, gs */
  const ir_node *y, *dy, *h0, *c0;
  int64_t w;              /* the result's width per step */
  LLVMValueRef dh, dc, du, dn; /* f32 scratch: dh [H], dc [H], du [G*H], the next dh [H] */
} rnn_bwd;

/* y[row, yt, which, j ..] (which: 0 h, 1 c, lstm_train's 2 + g the gate g; lstm's y is [N,T,2,H],
 * lstm_train's [N,T,6,H]), `lanes` of them */
static LLVMValueRef y_lanes(rnn_bwd *b, const ir_node *y, LLVMValueRef row, LLVMValueRef yt, int which, LLVMValueRef j,
                            int lanes) {
  cg_kctx *c = b->f.c;
  cg_emitter *e = c->e;
  int64_t per = y->type.rank == 4 ? y->type.dims[2] * b->f.h : b->f.h; /* dy: lstm's width, y: maybe lstm_train's */
  LLVMValueRef base = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(b->f.t), ""), yt, ""), i64c(per), "");
  return load_f(c, y, LLVMBuildAdd(B, base, LLVMBuildAdd(B, j, i64c(which * b->f.h), ""), ""), lanes);
}

static LLVMValueRef one_minus_sq(cg_emitter *e, LLVMValueRef v) {
  return LLVMBuildFSub(B, cg_const(e, LLVMTypeOf(v), 1.0), LLVMBuildFMul(B, v, v, ""), "");
}

static LLVMValueRef dsigm(cg_emitter *e, LLVMValueRef s) { /* s (1 - s) */
  return LLVMBuildFMul(B, s, LLVMBuildFSub(B, cg_const(e, LLVMTypeOf(s), 1.0), s, ""), "");
}

/* dst[b, k] += sum_j du[b, j] r[k, j] over j in [j0, j1), for the block's
 * rows b < nr: the gradient through h r. r's row k is contiguous in j, so
 * j goes in vectors of vw lanes: per row and k a vector of lane sums over
 * the j blocks in order, its lanes summed pairwise (lane i with lane
 * i + lanes/2, halving to one: 4 adds of 16 lanes, not 15 in a chain),
 * then the scalar tail of j in order, then added to dst[b, k]; RNN_KB rows of r per pass
 * and the block's nr rows, so each load of r serves nr sums and each load
 * of du RNN_KB. The order depends on the host's lanes only, never on the
 * block or the split of the rows. */
enum { RNN_KB = 4 };

/* v's lanes summed pairwise: the low half plus the high half until one. */
static LLVMValueRef hsum_pairwise(cg_emitter *e, LLVMValueRef v, int lanes) {
  for (int n = lanes / 2; n >= 1; n /= 2) {
    LLVMValueRef lo[32], hi[32];
    for (int i = 0; i < n; i++)
      lo[i] = LLVMConstInt(e->i32, (unsigned long long)i, 0), hi[i] = LLVMConstInt(e->i32, (unsigned long long)(i + n), 0);
    LLVMValueRef a = LLVMBuildShuffleVector(B, v, v, LLVMConstVector(lo, (unsigned)n), "");
    LLVMValueRef b = LLVMBuildShuffleVector(B, v, v, LLVMConstVector(hi, (unsigned)n), "");
    v = LLVMBuildFAdd(B, a, b, "");
  }
  return lanes > 1 ? LLVMBuildExtractElement(B, v, i64c(0), "") : v;
}

static void transposed_rows(rnn_bwd *b, LLVMValueRef dst, int nr, LLVMValueRef k0, int kb, int64_t j0, int64_t j1) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  int vw = e->vw > 0 ? e->vw : 1;
  int64_t nb = (j1 - j0) / vw, jt = j0 + nb * vw;
  LLVMTypeRef vt = vec(e, vw);
  LLVMValueRef acc[RNN_KB][RNN_MAX_ROWS], rrow[RNN_KB], sum[RNN_KB][RNN_MAX_ROWS];
  for (int q = 0; q < kb; q++) {
    rrow[q] = LLVMBuildMul(B, LLVMBuildAdd(B, k0, i64c(q), ""), i64c(s->gh), "r.row");
    for (int r = 0; r < nr; r++) {
      acc[q][r] = cg_entry_alloca(c, vt, "dot.v");
      LLVMBuildStore(B, cg_const(e, vt, 0.0), acc[q][r]);
    }
  }
  if (nb > 0) {
    cg_loop lj = cg_loop_begin(c, i64c(j0), i64c(jt), vw, "jv");
    LLVMValueRef dv[RNN_MAX_ROWS];
    for (int r = 0; r < nr; r++) dv[r] = ldv(s, b->du, LLVMBuildAdd(B, lj.iv, i64c(r * s->gh), ""), vw);
    for (int q = 0; q < kb; q++) {
      LLVMValueRef rv = load_f(c, s->r, LLVMBuildAdd(B, rrow[q], lj.iv, ""), vw);
      for (int r = 0; r < nr; r++) LLVMBuildStore(B, cg_fmuladd(e, dv[r], rv, get(c, acc[q][r], vt)), acc[q][r]);
    }
    cg_loop_end(c, &lj);
  }
  for (int q = 0; q < kb; q++)
    for (int r = 0; r < nr; r++) {
      sum[q][r] = cg_entry_alloca(c, e->f32, "dot");
      LLVMBuildStore(B, hsum_pairwise(e, get(c, acc[q][r], vt), vw), sum[q][r]);
    }
  if (jt < j1) {
    cg_loop lj = cg_loop_begin(c, i64c(jt), i64c(j1), 1, "j");
    for (int q = 0; q < kb; q++) {
      LLVMValueRef rv = load_f(c, s->r, LLVMBuildAdd(B, rrow[q], lj.iv, ""), 1);
      for (int r = 0; r < nr; r++) {
        LLVMValueRef dj = ld(s, b->du, LLVMBuildAdd(B, lj.iv, i64c(r * s->gh), ""));
        LLVMBuildStore(B, cg_fmuladd(e, dj, rv, get(c, sum[q][r], e->f32)), sum[q][r]);
      }
    }
    cg_loop_end(c, &lj);
  }
  for (int q = 0; q < kb; q++)
    for (int r = 0; r < nr; r++) {
      LLVMValueRef k = LLVMBuildAdd(B, LLVMBuildAdd(B, k0, i64c(q), ""), i64c(r * s->h), "");
      st(s, dst, k, LLVMBuildFAdd(B, ld(s, dst, k), get(c, sum[q][r], e->f32), ""));
    }
}

static void transposed_product(rnn_bwd *b, LLVMValueRef dst, int nr, int64_t j0, int64_t j1) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  int64_t kv = s->h / RNN_KB * RNN_KB;
  if (kv > 0) {
    cg_loop lk = cg_loop_begin(c, i64c(0), i64c(kv), RNN_KB, "k");
    transposed_rows(b, dst, nr, lk.iv, RNN_KB, j0, j1);
    cg_loop_end(c, &lk);
  }
  if (kv < s->h) {
    cg_loop lk = cg_loop_begin(c, i64c(kv), i64c(s->h), 1, "k.tail");
    transposed_rows(b, dst, nr, lk.iv, 1, j0, j1);
    cg_loop_end(c, &lk);
  }
}

/* Row bi of a block as a one-row view: its part of the block's scratch. */
static rnn_bwd bwd_view(rnn_bwd *b, LLVMValueRef bi) {
  rnn_bwd v = *b;
  v.f = row_view(&b->f, bi);
  v.dh = row_of(&b->f, b->dh, bi, b->f.h);
  v.dc = row_of(&b->f, b->dc, bi, b->f.h);
  v.dn = row_of(&b->f, b->dn, bi, b->f.h);
  v.du = row_of(&b->f, b->du, bi, b->f.gh);
  return v;
}

/* The time step's t, y's index yt and the state's yp (clamped in range). */
typedef struct bwd_time {
  LLVMValueRef step, t, yt, yp, first;
} bwd_time;

static bwd_time bwd_time_of(rnn_bwd *b, LLVMValueRef step) {
  cg_emitter *e = b->f.c->e;
  int reverse = (int)b->f.op->attr.reverse;
  bwd_time w;
  w.step = step;
  w.t = reverse ? LLVMBuildSub(B, i64c(b->f.t - 1), step, "t") : step;
  w.yt = reverse == 2 ? step : w.t;
  w.first = LLVMBuildICmp(B, LLVMIntEQ, step, i64c(0), "first");
  LLVMValueRef yp = reverse == 2 ? LLVMBuildSub(B, step, i64c(1), "") : reverse ? LLVMBuildAdd(B, w.t, i64c(1), "")
                                                                                : LLVMBuildSub(B, w.t, i64c(1), "");
  w.yp = LLVMBuildSelect(B, w.first, i64c(0), yp, "y.prev");
  return w;
}

/* The state before the step (b a row view): y at the previous step, or the
 * initial one; dn zeroed. */
static void bwd_prev(rnn_bwd *b, LLVMValueRef row, const bwd_time *w) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  int64_t h = s->h;
  LLVMValueRef first = w->first, yp = w->yp;
  int vw = e->vw > 0 ? e->vw : 1;
  int64_t hv = vw > 1 ? h / vw * vw : 0; /* scalar targets (NVPTX: vw 1) take the one-at-a-time pass for all */
  for (int pass = 0; pass < 2; pass++) { /* vectors of the host's lanes, then one at a time */
    int lanes = pass == 0 ? vw : 1;
    int64_t lo = pass == 0 ? 0 : hv, hi = pass == 0 ? hv : h;
    if (hi <= lo) continue;
    cg_loop lp = cg_loop_begin(c, i64c(lo), i64c(hi), lanes, "prev");
    LLVMValueRef si = LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(h), ""), lp.iv, "");
    stv(s, s->hs, lp.iv,
        LLVMBuildSelect(B, first, load_f(c, b->h0, si, lanes), y_lanes(b, b->y, row, yp, 0, lp.iv, lanes), ""));
    if (s->cs)
      stv(s, s->cs, lp.iv,
          LLVMBuildSelect(B, first, load_f(c, b->c0, si, lanes), y_lanes(b, b->y, row, yp, 1, lp.iv, lanes), ""));
    stv(s, b->dn, lp.iv, cg_const(e, vec(e, lanes), 0.0));
    cg_loop_end(c, &lp);
  }
}

#define U(g) ld(s, s->u, LLVMBuildAdd(B, j, i64c((g) * h), ""))
#define XP(g) load_f(c, s->xp, LLVMBuildAdd(B, xbase, LLVMBuildAdd(B, j, i64c((g) * h), ""), ""), 1)
#define SETDU(g, v) st(s, b->du, LLVMBuildAdd(B, j, i64c((g) * h), ""), or_skip(e, keep, (v), zero))

/* gru with the reset gate before: g * h (b a row view, u's z and r parts done) */
static void bwd_reset_h(rnn_bwd *b, LLVMValueRef row, const bwd_time *w) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  int64_t h = s->h;
  LLVMValueRef xbase = xp_base(s, row, w->t);
  cg_loop lg = cg_loop_begin(c, i64c(0), i64c(h), 1, "gh");
  LLVMValueRef j = lg.iv;
  st(s, s->gs, j, LLVMBuildFMul(B, sigm(e, LLVMBuildFAdd(B, XP(1), U(1), "")), ld(s, s->hs, j), ""));
  cg_loop_end(c, &lg);
}

/* Units [j0, j1) of one row's gradients at the step, in vectors of `lanes`
 * (b a row view, u holding the forward's products): the gates' gradients
 * into du, the direct part of the next dh into dn, dc; gru's dxp_h into
 * the result. Element-wise, so any lanes give the same bits. */
static void bwd_units(rnn_bwd *b, LLVMValueRef row, const bwd_time *w, LLVMValueRef ob, int64_t j0, int64_t j1,
                      int lanes) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  const ir_node *op = s->op;
  int64_t h = s->h;
  if (j1 <= j0) return;
  LLVMValueRef t = w->t, yt = w->yt;
  LLVMValueRef xbase = xp_base(s, row, t);
  bool gru = s->rb != NULL, gru_before = gru && !op->attr.reset_after;
  /* a step the mask skips passes dh (and dc) on whole and gives xp and the product no gradient */
  LLVMValueRef keep = taken(s, row, t), zero = cg_const(e, vec(e, lanes), 0.0), one = cg_const(e, vec(e, lanes), 1.0);
  cg_loop lj = cg_loop_begin(c, i64c(j0), i64c(j1), lanes, "gate");
  LLVMValueRef j = lj.iv;
#define UV(g) ldv(s, s->u, LLVMBuildAdd(B, j, i64c((g) * h), ""), lanes)
#define XPV(g) load_f(c, s->xp, LLVMBuildAdd(B, xbase, LLVMBuildAdd(B, j, i64c((g) * h), ""), ""), lanes)
#define SETDUV(g, v) stv(s, b->du, LLVMBuildAdd(B, j, i64c((g) * h), ""), or_skip(e, keep, (v), zero))
  LLVMValueRef dht = LLVMBuildFAdd(B, ldv(s, b->dh, j, lanes), y_lanes(b, b->dy, row, yt, 0, j, lanes), "dh.t");
  if (s->cs) { /* lstm: i, f, c, o */
    /* the forward's gates: lstm_train's y holds them, else from u as step() computes them (the same bits) */
    LLVMValueRef ig, fg, cc, og;
    if (s->reserve) {
      ig = y_lanes(b, b->y, row, yt, 2, j, lanes), fg = y_lanes(b, b->y, row, yt, 3, j, lanes);
      cc = y_lanes(b, b->y, row, yt, 4, j, lanes), og = y_lanes(b, b->y, row, yt, 5, j, lanes);
    } else {
      ig = sigm(e, UV(0)), fg = sigm(e, UV(1)), cc = tanh_(e, UV(2)), og = sigm(e, UV(3));
    }
    LLVMValueRef tc = tanh_(e, y_lanes(b, b->y, row, yt, 1, j, lanes));
    LLVMValueRef dcy = LLVMBuildFAdd(B, ldv(s, b->dc, j, lanes), y_lanes(b, b->dy, row, yt, 1, j, lanes), "");
    LLVMValueRef dct = LLVMBuildFAdd(B, dcy, LLVMBuildFMul(B, LLVMBuildFMul(B, dht, og, ""), one_minus_sq(e, tc), ""), "dc.t");
    SETDUV(0, LLVMBuildFMul(B, LLVMBuildFMul(B, dct, cc, ""), dsigm(e, ig), ""));
    SETDUV(1, LLVMBuildFMul(B, LLVMBuildFMul(B, dct, ldv(s, s->cs, j, lanes), ""), dsigm(e, fg), ""));
    SETDUV(2, LLVMBuildFMul(B, LLVMBuildFMul(B, dct, ig, ""), one_minus_sq(e, cc), ""));
    SETDUV(3, LLVMBuildFMul(B, LLVMBuildFMul(B, dht, tc, ""), dsigm(e, og), ""));
    stv(s, b->dc, j, or_skip(e, keep, LLVMBuildFMul(B, dct, fg, ""), dcy));
  } else if (gru) { /* z, r, h */
    LLVMValueRef z = sigm(e, LLVMBuildFAdd(B, XPV(0), UV(0), ""));
    LLVMValueRef g = sigm(e, LLVMBuildFAdd(B, XPV(1), UV(1), ""));
    LLVMValueRef pre = gru_before ? UV(2) : LLVMBuildFMul(B, g, UV(2), "");
    LLVMValueRef cand = tanh_(e, LLVMBuildFAdd(B, XPV(2), pre, ""));
    LLVMValueRef hp = ldv(s, s->hs, j, lanes);
    SETDUV(0, LLVMBuildFMul(B, LLVMBuildFMul(B, dht, LLVMBuildFSub(B, hp, cand, ""), ""), dsigm(e, z), ""));
    LLVMValueRef dpre = LLVMBuildFMul(B, LLVMBuildFMul(B, dht, LLVMBuildFSub(B, one, z, ""), ""),
                                      one_minus_sq(e, cand), "dpre");
    /* reset after: xp_h's gradient dpre, u_h's dpre g, g's dpre u_h; before: both dpre, g's below */
    store_f(c, op, LLVMBuildAdd(B, ob, LLVMBuildAdd(B, j, i64c(2 * h), ""), ""), or_skip(e, keep, dpre, zero), lanes);
    SETDUV(2, gru_before ? dpre : LLVMBuildFMul(B, dpre, g, ""));
    if (!gru_before) SETDUV(1, LLVMBuildFMul(B, LLVMBuildFMul(B, dpre, UV(2), ""), dsigm(e, g), ""));
    stv(s, b->dn, j, or_skip(e, keep, LLVMBuildFMul(B, dht, z, ""), dht));
  } else {
    /* f32: y's h_t is tanh(u) itself (a masked step's du is 0 whatever it holds) */
    LLVMValueRef ht = s->reserve ? y_lanes(b, b->y, row, yt, 0, j, lanes) : tanh_(e, UV(0));
    SETDUV(0, LLVMBuildFMul(B, dht, one_minus_sq(e, ht), ""));
  }
  if (keep && !gru) stv(s, b->dn, j, or_skip(e, keep, zero, dht)); /* du r^T adds 0 where skipped */
#undef UV
#undef XPV
#undef SETDUV
  cg_loop_end(c, &lj);
}

/* dst[off + j] = src[j] for j in [0, n) (src f32 scratch; dst the result
 * at row base ob), in vectors of the host's lanes, then one at a time. */
static void bwd_copy_out(rnn_bwd *b, LLVMValueRef ob, int64_t off, LLVMValueRef src, int64_t n) {
  cg_kctx *c = b->f.c;
  cg_emitter *e = c->e;
  int vw = e->vw > 0 ? e->vw : 1;
  int64_t nv = vw > 1 ? n / vw * vw : 0;
  for (int pass = 0; pass < 2; pass++) {
    int lanes = pass == 0 ? vw : 1;
    int64_t lo = pass == 0 ? 0 : nv, hi = pass == 0 ? nv : n;
    if (hi <= lo) continue;
    cg_loop l = cg_loop_begin(c, i64c(lo), i64c(hi), lanes, "out");
    store_f(c, b->f.op, LLVMBuildAdd(B, ob, LLVMBuildAdd(B, l.iv, i64c(off), ""), ""), ldv(&b->f, src, l.iv, lanes), lanes);
    cg_loop_end(c, &l);
  }
}

/* One row's gradients at the step once u holds the forward's products (b a
 * row view): du, dn's direct part, dc, the result's row at t. */
static void bwd_gates(rnn_bwd *b, LLVMValueRef row, const bwd_time *w) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  const ir_node *op = s->op;
  int64_t h = s->h;
  LLVMValueRef t = w->t;
  LLVMValueRef ob = LLVMBuildMul(B, LLVMBuildAdd(B, LLVMBuildMul(B, row, i64c(s->t), ""), t, ""), i64c(b->w), "out.base");
  LLVMValueRef xbase = xp_base(s, row, t);
  bool gru = s->rb != NULL, gru_before = gru && !op->attr.reset_after;
  /* per unit: the gates' gradients into du, the direct part of the next dh into dn */
  int vw = e->vw > 0 ? e->vw : 1;
  int64_t hv = h / vw * vw;
  bwd_units(b, row, w, ob, 0, hv, vw);
  bwd_units(b, row, w, ob, hv, h, 1);
  if (gru_before) { /* d(g h) = du_h r_h^T: g's gradient and h_{t-1}'s through g h */
    LLVMValueRef keep = taken(s, row, t), zero = F(0.0), j;
    LLVMValueRef dgh = s->gs; /* g h is stored to the result below first */
    cg_loop lq = cg_loop_begin(c, i64c(0), i64c(h), 1, "p2");
    store_f(c, op, LLVMBuildAdd(B, ob, LLVMBuildAdd(B, lq.iv, i64c(2 * s->gh + h), ""), ""), ld(s, s->gs, lq.iv), 1);
    st(s, dgh, lq.iv, F(0.0));
    cg_loop_end(c, &lq);
    transposed_product(b, dgh, 1, 2 * h, 3 * h); /* (k over r's rows: dgh[k] = sum_j du_h[j] r[k, 2H + j]) */
    cg_loop lg = cg_loop_begin(c, i64c(0), i64c(h), 1, "dg");
    j = lg.iv;
    LLVMValueRef g = sigm(e, LLVMBuildFAdd(B, XP(1), U(1), ""));
    LLVMValueRef d = ld(s, dgh, j);
    SETDU(1, LLVMBuildFMul(B, LLVMBuildFMul(B, d, ld(s, s->hs, j), ""), dsigm(e, g), ""));
    st(s, b->dn, j, LLVMBuildFAdd(B, ld(s, b->dn, j), LLVMBuildFMul(B, d, g, ""), ""));
    cg_loop_end(c, &lg);
  }
  /* the result at t: dxp (gru: z and r as du; h was stored above), du, p1, p2; then
   * dh_{t-1} = dn + du r^T (gru before: over z and r) */
  bwd_copy_out(b, ob, 0, b->du, gru ? 2 * h : s->gh);
  bwd_copy_out(b, ob, s->gh, b->du, s->gh);
  bwd_copy_out(b, ob, 2 * s->gh, s->hs, h);
  if (!gru_before) bwd_copy_out(b, ob, 2 * s->gh + h, s->hs, h);
}
#undef U
#undef XP
#undef SETDU

/* One step back for the nr rows from row0: the state before it, the
 * forward's u (and g * h with gru's reset gate before), the gates'
 * gradients, then dh_{t-1} = dn + du r^T (gru before: over z and r). */
static void bwd_step(rnn_bwd *b, LLVMValueRef row0, int nr, LLVMValueRef step) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  int64_t h = s->h;
  bool gru_before = s->rb && !s->op->attr.reset_after;
  bwd_time w = bwd_time_of(b, step);
  cg_loop l1 = cg_loop_begin(c, i64c(0), i64c(nr), 1, "blk.prev");
  rnn_bwd v1 = bwd_view(b, l1.iv);
  bwd_prev(&v1, LLVMBuildAdd(B, row0, l1.iv, "row"), &w);
  cg_loop_end(c, &l1);
  if (!s->reserve) recurrent_product(s, s->hs, nr, row0, w.t, 0, gru_before ? 2 * h : s->gh);
  if (gru_before) {
    cg_loop l2 = cg_loop_begin(c, i64c(0), i64c(nr), 1, "blk.gh");
    rnn_bwd v2 = bwd_view(b, l2.iv);
    bwd_reset_h(&v2, LLVMBuildAdd(B, row0, l2.iv, "row"), &w);
    cg_loop_end(c, &l2);
    recurrent_product(s, s->gs, nr, row0, w.t, 2 * h, 3 * h);
  }
  cg_loop l3 = cg_loop_begin(c, i64c(0), i64c(nr), 1, "blk.gate");
  rnn_bwd v3 = bwd_view(b, l3.iv);
  bwd_gates(&v3, LLVMBuildAdd(B, row0, l3.iv, "row"), &w);
  cg_loop_end(c, &l3);
  transposed_product(b, b->dn, nr, 0, gru_before ? 2 * h : s->gh);
  int vw = e->vw > 0 ? e->vw : 1;
  int64_t n = nr * h, nv = vw > 1 ? n / vw * vw : 0;
  for (int pass = 0; pass < 2; pass++) { /* dh = dn: vectors, then one at a time */
    int lanes = pass == 0 ? vw : 1;
    int64_t lo = pass == 0 ? 0 : nv, hi = pass == 0 ? nv : n;
    if (hi <= lo) continue;
    cg_loop ld_ = cg_loop_begin(c, i64c(lo), i64c(hi), lanes, "dh.next");
    stv(s, b->dh, ld_.iv, ldv(s, b->dn, ld_.iv, lanes));
    cg_loop_end(c, &ld_);
  }
}

/* Rows [lo, hi) in blocks of nr (while nr remain), every step backwards;
 * returns the first row not done (hi when nr is 1). */
static LLVMValueRef bwd_rows(rnn_bwd *b, LLVMValueRef lo, LLVMValueRef hi, int nr) {
  rnn *s = &b->f;
  cg_kctx *c = s->c;
  cg_emitter *e = c->e;
  cg_loop lr = cg_loop_begin(c, lo, hi, nr, nr > 1 ? "rows" : "row");
  cg_loop l0 = cg_loop_begin(c, i64c(0), i64c(nr * s->h), 1, "dh0");
  st(s, b->dh, l0.iv, F(0.0));
  st(s, b->dc, l0.iv, F(0.0));
  cg_loop_end(c, &l0);
  cg_loop lt = cg_loop_begin(c, i64c(0), i64c(s->t), 1, "back");
  bwd_step(b, lr.iv, nr, LLVMBuildSub(B, i64c(s->t - 1), lt.iv, "step"));
  cg_loop_end(c, &lt);
  cg_loop_end(c, &lr);
  return lr.iv;
}

void cg_train_rnn_grad(cg_kctx *c) {
  cg_emitter *e = c->e;
  const ir_node *op = op_of(c);
  int gates = ir_rnn_gates(op->op), states = ir_rnn_states(op->op);
  CASTOR_ASSERT(ir_rnn_forward(op->op) != IR_OP_COUNT);
  rnn_bwd b = {{c, op, op->srcs[0], op->srcs[1], NULL, ir_rnn_mask(op), 0, 0, 0, NULL, NULL, NULL, NULL, 0, false}, NULL, NULL,
               NULL, NULL, 0, NULL, NULL, NULL, NULL};
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
  /* lstm_grad of lstm_train's y: the gates after h and c, no recurrent product of the forward again */
  s->yw = b.y->type.rank == 4 ? b.y->type.dims[2] * s->h : s->h;
  s->reserve = states == 2 && b.y->type.dims[2] == 2 + gates;
  /* simple_rnn in f32: y's h_t is the step's tanh(u) bit for bit (no rounding), so it serves as lstm_train's
   * gates do; a 16-bit y is rounded, and its gradient recomputes tanh(u) in f32 */
  if (gates == 1 && op->type.dtype == DT_F32 && b.y->type.dtype == DT_F32) s->reserve = true;
  b.w = ir_rnn_grad_width(op->op, s->h);
  int nr = rnn_block_rows(e, 2 * s->gh, false);
  LLVMTypeRef hty = LLVMArrayType2(e->f32, (uint64_t)(nr * s->h)), uty = LLVMArrayType2(e->f32, (uint64_t)(nr * s->gh));
  s->hs = cg_entry_alloca(c, hty, "h.prev");
  s->u = cg_entry_alloca(c, uty, "u");
  s->gs = cg_entry_alloca(c, hty, "gh");
  if (states == 2) s->cs = cg_entry_alloca(c, hty, "c.prev");
  b.dh = cg_entry_alloca(c, hty, "dh");
  b.dc = cg_entry_alloca(c, hty, "dc");
  b.du = cg_entry_alloca(c, uty, "du");
  b.dn = cg_entry_alloca(c, hty, "dh.next");
  int64_t per = cg_launch_rows(c, op);
  LLVMValueRef lo = LLVMBuildMul(B, c->row0, i64c(per), ""), hi = LLVMBuildMul(B, c->row1, i64c(per), "");
  if (nr > 1) lo = bwd_rows(&b, lo, hi, nr);
  bwd_rows(&b, lo, hi, 1);
}
