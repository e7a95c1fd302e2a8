/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_rnn.c: ONNX's recurrent ops, LSTM, GRU and RNN, lowered to castor's
 * scans (ir_ops.def: lstm, gru, simple_rnn; kernels: codegen/kernel/cg_rnn.c).
 * Per direction d (forward, reverse, or both: bidirectional):
 *
 *   x         [N,T,D]: X itself (layout 1) or X [T,N,D] transposed (layout 0)
 *   xp        x W_d^T + Wb (+ Rb for LSTM and RNN): one matmul over every step,
 *             W_d's gate blocks reordered to Keras's (LSTM i,o,f,c -> i,f,c,o;
 *             GRU z,r,h and RNN as they are)
 *   r         R_d^T [H, G*H], reordered the same way
 *   rb        (GRU) Rb_d: linear_before_reset 1 is gru's reset_after
 *   states    initial_h[d] (initial_c[d]) [N,H], or zeros
 *   mask      with sequence_lens: t < sequence_lens[n], i1 [N,T], the
 *             scans' last operand (a masked step carries the state, so the
 *             reverse scan starts at step len-1 as ONNX's does); Y is 0
 *             past a row's length, Y_h (Y_c) the state at its last valid
 *             step, 0 for a row of length 0 (ONNX Runtime's outputs)
 *   y         the scan, {reverse} for the reverse direction; its result is
 *             aligned with the input, so Y is the directions stacked and Y_h
 *             (Y_c) the state at the last step read (t = T-1, reverse t = 0).
 *
 * What castor does not compute is a located error: activations other than
 * the defaults (any activations attribute), clip, input_forget, LSTM's
 * peepholes P. A sequence_lens entry outside [0, T] is the model's error
 * (a constant) or the run's (a graph input, checked before each run).
 */
#include <string.h>

#include "frontend/onnx/internal.h"

#define FAIL(im, ...) oi_fail_kind((im), DIAG_KIND_INVALID_MODEL, __VA_ARGS__)
#define UNSUPPORTED(im, ...) oi_fail_kind((im), DIAG_KIND_UNSUPPORTED, __VA_ARGS__)

typedef struct rnn_lower {
  imp *im;
  ir_op op;
  int gates, dirs;
  int64_t h;
  const int *order; /* castor's gate g is ONNX's gate order[g] */
} rnn_lower;

static ir_node *slice(rnn_lower *s, ir_node *x, int axis, int64_t start, int64_t end, const char *what) {
  ir_attr a = {.starts = {.n = x->type.rank}, .ends = {.n = x->type.rank}, .steps = {.n = x->type.rank}};
  for (int r = 0; r < x->type.rank; r++) /* the whole dimension (N's: 0 to 0) */
    a.steps.v[r] = 1, a.ends.v[r] = x->type.dims[r] == IR_DIM_BATCH ? 0 : x->type.dims[r];
  a.starts.v[axis] = start, a.ends.v[axis] = end;
  return oi_build(s->im, IR_OP_STRIDED_SLICE, what, &x, 1, &a);
}

static ir_node *reshape(rnn_lower *s, ir_node *x, int rank, const int64_t *dims, const char *what) {
  ir_attr a = {.shape = {.rank = rank}};
  for (int r = 0; r < rank; r++) a.shape.dims[r] = dims[r];
  return x ? oi_build(s->im, IR_OP_RESHAPE, what, &x, 1, &a) : NULL;
}

static ir_node *transpose(rnn_lower *s, ir_node *x, int rank, const int *perm, const char *what) {
  ir_attr a = {.perm = {.n = rank}};
  for (int r = 0; r < rank; r++) a.perm.v[r] = perm[r];
  return x ? oi_build(s->im, IR_OP_TRANSPOSE, what, &x, 1, &a) : NULL;
}

static ir_node *concat(rnn_lower *s, ir_node **xs, int n, int axis, const char *what) {
  for (int i = 0; i < n; i++)
    if (!xs[i]) return NULL;
  if (n == 1) return xs[0];
  return oi_build(s->im, IR_OP_CONCAT, what, xs, n, &(ir_attr){.axis = axis});
}

/* w[d] of a [dirs, n_blocks * per_gate, ...] weight with its blocks of
 * per_gate rows in castor's gate order (block b is ONNX's block
 * order[b % gates] of the same group b / gates: B holds Wb then Rb). */
static ir_node *direction_gates(rnn_lower *s, ir_node *w, int d, int64_t per_gate, int n_blocks, const char *what) {
  ir_node *wd = slice(s, w, 0, d, d + 1, what);
  if (!wd) return NULL;
  int64_t dims[IR_MAX_RANK];
  for (int r = 1; r < w->type.rank; r++) dims[r - 1] = w->type.dims[r];
  wd = reshape(s, wd, w->type.rank - 1, dims, what);
  if (!wd) return NULL;
  ir_node *blocks[8];
  for (int b = 0; b < n_blocks; b++) {
    int src = s->order[b % s->gates] + (b / s->gates) * s->gates;
    blocks[b] = slice(s, wd, 0, src * per_gate, (src + 1) * per_gate, what);
  }
  return concat(s, blocks, n_blocks, 0, what);
}

/* An optional input k, or NULL without an error. */
static ir_node *optional(imp *im, int k, bool *ok) {
  *ok = true;
  if (!oi_has_input(im, k)) return NULL;
  imp_val *v = oi_input(im, k);
  ir_node *n = v ? oi_operand(im, v) : NULL;
  if (!n) *ok = false;
  return n;
}

/* where(cond, x, 0), cond i1 broadcast against x */
static ir_node *zero_unless(rnn_lower *s, ir_node *cond, ir_node *x, const char *what) {
  if (!x) return NULL;
  ir_node *zero = oi_scalar_const(s->im, what, 0.0);
  return oi_build(s->im, IR_OP_SELECT, what, (ir_node *[]){cond, x, zero}, 3, NULL);
}

/* sequence_lens (input 4) as the scans' mask: mask i1 [N,T] (also [N,T,1,1]
 * for Y) = t < sequence_lens[n], valid i1 [N,1,1] = sequence_lens[n] > 0
 * (its step 0 is data; ONNX Runtime's Y_h and Y_c are 0 for a row of
 * none). Both NULL without sequence_lens or with a constant one that is
 * the sequence's length everywhere. A constant entry outside [0, T] is the
 * model's error; a run-time one is checked before each run (the program's
 * input limits: cg_program.c). */
static bool sequence_mask(rnn_lower *s, int64_t nb, int64_t t_len, ir_node **mask, ir_node **valid) {
  imp *im = s->im;
  const char *op = im->node->op_type;
  *mask = *valid = NULL;
  if (!oi_has_input(im, 4)) return true;
  imp_val *v = oi_input(im, 4);
  if (!v) return false;
  if (v->k) {
    bool whole = true;
    for (int64_t i = 0; i < v->k->numel; i++) {
      int64_t l = oi_elem_i64(v->k, i);
      if (l < 0 || l > t_len)
        return FAIL(im, "%s sequence_lens[%lld] is %lld, outside the sequence's [0, %lld] steps", op, (long long)i,
                    (long long)l, (long long)t_len);
      whole = whole && l == t_len;
    }
    if (whole && (nb == IR_DIM_BATCH || v->k->numel == nb)) return true; /* every row whole: the plain scan */
  }
  ir_node *lens = oi_int_operand(im, v);
  if (!lens) return false;
  if ((lens->type.dtype != DT_I32 && lens->type.dtype != DT_I64) || lens->type.rank != 1 || lens->type.dims[0] != nb) {
    str_buf sb;
    str_buf_init(&sb);
    ir_type_print(&lens->type, &sb);
    bool bad = FAIL(im, "%s sequence_lens must be int32 [%s] (batch_size), got %s", op,
                    nb == IR_DIM_BATCH ? "N" : arena_printf(im->g->arena, "%lld", (long long)nb), str_buf_cstr(&sb));
    str_buf_fini(&sb);
    return bad;
  }
  /* the step numbers 0..T-1 as a [1, T] constant of the lengths' dtype */
  ir_type st = {.dtype = lens->type.dtype, .rank = 2, .dims = {1, t_len}};
  void *data = arena_alloc_aligned(im->g->arena, (size_t)t_len * 8, 64);
  for (int64_t t = 0; t < t_len; t++) {
    if (st.dtype == DT_I64) ((int64_t *)data)[t] = t;
    else ((int32_t *)data)[t] = (int32_t)t;
  }
  const char *name = arena_printf(im->g->arena, "%s.steps", im->layer);
  ir_node *steps = ir_build_const(im->g, oi_ir_name(im, name, "const"), &st, name, data, im->loc);
  steps->layer = im->layer;
  steps->frozen = true;
  ir_node *col = reshape(s, lens, 2, (int64_t[]){nb, 1}, "sequence_lens");
  ir_node *m = col ? oi_build(im, IR_OP_LESS, "mask", (ir_node *[]){steps, col}, 2, NULL) : NULL;
  ir_node *first = m ? slice(s, m, 1, 0, 1, "valid") : NULL;
  *valid = reshape(s, first, 3, (int64_t[]){nb, 1, 1}, "valid");
  *mask = m;
  return *valid != NULL;
}

bool oi_lower_rnn(imp *im, const onnx_node *n, const op_row *row) {
  (void)row;
  static const int lstm_order[] = {0, 2, 3, 1}, same_order[] = {0, 1, 2};
  rnn_lower s = {im, row->ir, 0, 1, 0, same_order};
  s.gates = ir_rnn_gates(s.op);
  if (s.op == IR_OP_LSTM) s.order = lstm_order;
  int64_t hidden = 0, layout = 0, lbr = 0, input_forget = 0;
  if (!oi_attr_int(im, "hidden_size", 0, &hidden) || !oi_attr_int(im, "layout", 0, &layout) ||
      !oi_attr_int(im, "linear_before_reset", 0, &lbr) || !oi_attr_int(im, "input_forget", 0, &input_forget))
    return false;
  if (oi_attr_find(im, "activations") || oi_attr_find(im, "activation_alpha") || oi_attr_find(im, "activation_beta"))
    return UNSUPPORTED(im, "%s with an activations attribute: castor computes the default activations only",
                       n->op_type);
  if (oi_attr_find(im, "clip")) return UNSUPPORTED(im, "%s with clip: castor does not clip the cell", n->op_type);
  if (input_forget) return UNSUPPORTED(im, "LSTM with input_forget=1 (coupled input and forget gates)");
  if (layout != 0 && layout != 1) return FAIL(im, "%s layout is %lld; ONNX has 0 and 1", n->op_type, (long long)layout);
  const onnx_attr *da = oi_attr_find(im, "direction");
  if (da && !oi_attr_typed(im, da, ONNX_ATTR_STRING)) return false;
  const char *dir = da ? da->s : "forward";
  bool bidi = !strcmp(dir, "bidirectional"), rev = !strcmp(dir, "reverse");
  if (!bidi && !rev && strcmp(dir, "forward"))
    return FAIL(im, "%s direction is '%s'; ONNX has forward, reverse and bidirectional", n->op_type, dir);
  s.dirs = bidi ? 2 : 1;
  imp_val *vx = oi_input(im, 0), *vw = vx ? oi_input(im, 1) : NULL, *vr = vw ? oi_input(im, 2) : NULL;
  if (!vr) return false;
  ir_node *x = oi_operand(im, vx), *w = oi_operand(im, vw), *r = oi_operand(im, vr);
  if (!x || !w || !r) return false;
  bool ok;
  ir_node *b = optional(im, 3, &ok);
  if (!ok) return false;
  if (s.op == IR_OP_LSTM && oi_has_input(im, 7)) return UNSUPPORTED(im, "LSTM with peepholes (input P)");
  if (x->type.rank != 3)
    return FAIL(im, "%s input X must be rank 3 ([seq_length, batch_size, input_size] or, with layout 1, batch "
                "first), got rank %d", n->op_type, x->type.rank);
  if (layout == 0 && ir_type_is_batched(&x->type))
    return UNSUPPORTED(im, "%s with layout 0 over the symbolic batch: X's first dimension is the sequence; "
                       "bind the batch (--batch) or export with static shapes", n->op_type);
  int64_t gh = (int64_t)s.gates * hidden;
  if (hidden < 1 || w->type.rank != 3 || w->type.dims[0] != s.dirs || w->type.dims[1] != gh ||
      w->type.dims[2] != x->type.dims[2])
    return FAIL(im, "%s W must be [%d, %lld, %lld] (directions, %d*hidden_size, input_size)", n->op_type, s.dirs,
                (long long)gh, (long long)x->type.dims[2], s.gates);
  if (r->type.rank != 3 || r->type.dims[0] != s.dirs || r->type.dims[1] != gh || r->type.dims[2] != hidden)
    return FAIL(im, "%s R must be [%d, %lld, %lld]", n->op_type, s.dirs, (long long)gh, (long long)hidden);
  if (b && (b->type.rank != 2 || b->type.dims[0] != s.dirs || b->type.dims[1] != 2 * gh))
    return FAIL(im, "%s B must be [%d, %lld]", n->op_type, s.dirs, (long long)(2 * gh));
  s.h = hidden;
  if (layout == 0) x = transpose(&s, x, 3, (const int[]){1, 0, 2}, "x");
  if (!x) return false;
  int64_t nb = x->type.dims[0], t_len = x->type.dims[1];
  ir_node *mask = NULL, *valid = NULL;
  if (!sequence_mask(&s, nb, t_len, &mask, &valid)) return false;
  ir_node *mask4 = mask ? reshape(&s, mask, 4, (int64_t[]){nb, t_len, 1, 1}, "mask.y") : NULL;
  if (mask && !mask4) return false;
  ir_node *init[2];
  for (int k = 0; k < 2; k++) {
    init[k] = k == 0 || s.op == IR_OP_LSTM ? optional(im, 5 + k, &ok) : NULL;
    if (!ok) return false;
    if (init[k] && (init[k]->type.rank != 3 || init[k]->type.dims[0] != s.dirs || init[k]->type.dims[1] != nb ||
                    init[k]->type.dims[2] != hidden)) {
      str_buf sb;
      str_buf_init(&sb);
      ir_type_print(&init[k]->type, &sb);
      bool bad = FAIL(im, "%s %s must be [%d, %lld, %lld] (directions, batch_size, hidden_size), got %s", n->op_type,
                      k ? "initial_c" : "initial_h", s.dirs, (long long)nb, (long long)hidden, str_buf_cstr(&sb));
      str_buf_fini(&sb);
      return bad;
    }
  }
  int states = ir_rnn_states(s.op);
  ir_node *ys[2], *yh[2], *yc[2];
  for (int d = 0; d < s.dirs; d++) {
    bool reverse = bidi ? d == 1 : rev;
    ir_node *wd = transpose(&s, direction_gates(&s, w, d, hidden, s.gates, "w"), 2, (const int[]){1, 0}, "w.t");
    ir_node *rd = transpose(&s, direction_gates(&s, r, d, hidden, s.gates, "r"), 2, (const int[]){1, 0}, "r.t");
    ir_node *xp = wd ? oi_build(im, IR_OP_MATMUL, "xp", (ir_node *[]){x, wd}, 2, &(ir_attr){.acc = DT_F32}) : NULL;
    ir_node *srcs[6] = {NULL, rd};
    int k = 2;
    if (b) {
      ir_node *bd = reshape(&s, direction_gates(&s, reshape(&s, b, 3, (int64_t[]){s.dirs, 2 * gh, 1}, "b"), d, hidden,
                                                2 * s.gates, "b"),
                            1, (int64_t[]){2 * gh}, "b.d");
      ir_node *wb = bd ? slice(&s, bd, 0, 0, gh, "wb") : NULL, *rb = bd ? slice(&s, bd, 0, gh, 2 * gh, "rb") : NULL;
      if (!wb || !rb) return false;
      if (s.op == IR_OP_GRU) srcs[k++] = rb;
      else wb = oi_build(im, IR_OP_ADD, "bias", (ir_node *[]){wb, rb}, 2, NULL);
      xp = xp && wb ? oi_build(im, IR_OP_ADD, "xp.bias", (ir_node *[]){xp, wb}, 2, NULL) : NULL;
    } else if (s.op == IR_OP_GRU) {
      srcs[k++] = oi_build(im, IR_OP_BROADCAST_TO, "rb.zero", (ir_node *[]){oi_scalar_const(im, "rb.zero", 0.0)}, 1,
                           &(ir_attr){.shape = {1, {gh}}});
    }
    srcs[0] = xp;
    for (int st = 0; st < states; st++) {
      ir_node *v;
      if (init[st]) {
        v = reshape(&s, slice(&s, init[st], 0, d, d + 1, st ? "c0" : "h0"), 2, (int64_t[]){nb, hidden},
                    st ? "c0" : "h0");
      } else {
        v = oi_build(im, IR_OP_BROADCAST_TO, st ? "c0" : "h0", (ir_node *[]){oi_scalar_const(im, "zero", 0.0)}, 1,
                     &(ir_attr){.shape = {2, {nb, hidden}}});
      }
      srcs[k++] = v;
    }
    if (mask) srcs[k++] = mask;
    for (int i = 0; i < k; i++)
      if (!srcs[i]) return false;
    ir_attr a = {.reverse = reverse, .reset_after = s.op == IR_OP_GRU && lbr != 0};
    ir_node *y = oi_build(im, s.op, d ? "scan.reverse" : "scan", srcs, k, &a);
    if (!y) return false;
    int64_t last = reverse ? 0 : t_len - 1;
    if (states == 2) {
      ir_node *hs = slice(&s, y, 2, 0, 1, "h"), *cs = slice(&s, y, 2, 1, 2, "c");
      ys[d] = reshape(&s, hs, 4, (int64_t[]){nb, t_len, 1, hidden}, "y");
      yc[d] = reshape(&s, cs ? slice(&s, cs, 1, last, last + 1, "c.last") : NULL, 3, (int64_t[]){nb, 1, hidden},
                      "y_c");
    } else {
      ys[d] = reshape(&s, y, 4, (int64_t[]){nb, t_len, 1, hidden}, "y");
      yc[d] = NULL;
    }
    yh[d] = reshape(&s, ys[d] ? slice(&s, ys[d], 1, last, last + 1, "h.last") : NULL, 3, (int64_t[]){nb, 1, hidden},
                    "y_h");
    if (mask) { /* Y 0 past a row's length; Y_h (Y_c) 0 for a row of none */
      ys[d] = zero_unless(&s, mask4, ys[d], "y.masked");
      yh[d] = zero_unless(&s, valid, yh[d], "y_h.masked");
      if (states == 2) yc[d] = zero_unless(&s, valid, yc[d], "y_c.masked");
    }
  }
  /* Y [N,T,dirs,H] (layout 1) or [T,dirs,N,H]; Y_h, Y_c [N,dirs,H] or [dirs,N,H] */
  ir_node *outs[3] = {concat(&s, ys, s.dirs, 2, "Y"), concat(&s, yh, s.dirs, 1, "Y_h"),
                      states == 2 ? concat(&s, yc, s.dirs, 1, "Y_c") : NULL};
  if (layout == 0) {
    outs[0] = transpose(&s, outs[0], 4, (const int[]){1, 2, 0, 3}, "Y.t");
    for (int o = 1; o < 1 + states; o++) outs[o] = transpose(&s, outs[o], 3, (const int[]){1, 0, 2}, "Y_h.t");
  }
  for (int o = 0; o < n->n_outputs && o < 1 + states; o++) {
    if (!n->outputs[o][0]) continue; /* an output the model leaves out */
    if (!oi_define_output(im, o, outs[o])) return false;
  }
  if (n->n_outputs > 1 + states) return FAIL(im, "%s has %d outputs; it defines %d", n->op_type, n->n_outputs, 1 + states);
  return true;
}
