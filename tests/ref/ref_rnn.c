/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ref_rnn.c: the float64 reference of the recurrent ops (simple_rnn, gru,
 * lstm), written from ir_ops.def's formulas in the plainest loops: every
 * batch row, every step in time order (or reversed with {reverse}), the
 * recurrent product summed over k in order, the gates, the new state
 * rounded to the op's dtype at every step (as the kernel keeps a 16-bit
 * layer's state: codegen/kernel/cg_rnn.c), y aligned with the input (or,
 * {reverse}=2, in the order of the steps). A mask operand (0/1 per batch
 * row and time, aligned with xp) skips a step where 0: the state stays and
 * y gets it; backward, dh and dc pass such a step whole, dxp and du are 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/ref/ref.h"

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static bool eval_grad(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count,
                      int64_t batch, char *err, size_t errlen);

bool ref_eval_rnn(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count, int64_t batch,
                  char *err, size_t errlen) {
  if (ir_rnn_forward(n->op) != IR_OP_COUNT) return eval_grad(n, src, n_src, y, count, batch, err, errlen);
  int gates = ir_rnn_gates(n->op), states = ir_rnn_states(n->op);
  int64_t h = n->srcs[1]->type.dims[0], gh = n->srcs[1]->type.dims[1], t_len = n->srcs[0]->type.dims[1];
  ir_dtype dt = n->type.dtype;
  bool gru = gates == 3;
  int first_state = gru ? 3 : 2;
  int64_t yw = (states + (ir_rnn_reserve(n->op) ? gates : 0)) * h; /* lstm_train: h, c, then the 4 gates */
  if (n_src[0] != batch * t_len * gh || n_src[1] != h * gh || count != batch * t_len * yw ||
      n_src[first_state] != batch * h || (states == 2 && n_src[first_state + 1] != batch * h))
    return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
  const double *xp = src[0], *r = src[1], *rb = gru ? src[2] : NULL;
  const double *mask = ir_rnn_mask(n) ? src[first_state + states] : NULL;
  double *hs = calloc((size_t)h, sizeof *hs), *cs = calloc((size_t)h, sizeof *cs);
  double *u = calloc((size_t)gh, sizeof *u), *g = calloc((size_t)h, sizeof *g);
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t j = 0; j < h; j++) {
      hs[j] = src[first_state][b * h + j];
      if (states == 2) cs[j] = src[first_state + 1][b * h + j];
    }
    for (int64_t s = 0; s < t_len; s++) {
      int64_t t = n->attr.reverse ? t_len - 1 - s : s;
      const double *x = xp + (b * t_len + t) * gh;
      bool before = gru && !n->attr.reset_after;
      for (int64_t j = 0; j < gh; j++) u[j] = gru ? rb[j] : x[j];
      for (int64_t k = 0; k < h; k++)
        for (int64_t j = 0; j < (before ? 2 * h : gh); j++) u[j] += hs[k] * r[k * gh + j];
      if (before) {
        for (int64_t j = 0; j < h; j++) g[j] = sigmoid(x[h + j] + u[h + j]) * hs[j];
        for (int64_t k = 0; k < h; k++)
          for (int64_t j = 2 * h; j < 3 * h; j++) u[j] += g[k] * r[k * gh + j];
      }
      double *yt = y + (b * t_len + (n->attr.reverse == 2 ? s : t)) * yw;
      bool skip = mask && mask[b * t_len + t] == 0;
      for (int64_t j = 0; j < h; j++) {
        double hn;
        if (yw > states * h) { /* lstm_train: the step's activated gates, masked or not */
          yt[2 * h + j] = sigmoid(u[j]), yt[3 * h + j] = sigmoid(u[h + j]);
          yt[4 * h + j] = tanh(u[2 * h + j]), yt[5 * h + j] = sigmoid(u[3 * h + j]);
        }
        if (skip) {
          yt[j] = hs[j];
          if (states == 2) yt[h + j] = cs[j];
          continue;
        }
        if (states == 2) {
          double c = sigmoid(u[h + j]) * cs[j] + sigmoid(u[j]) * tanh(u[2 * h + j]);
          cs[j] = ref_round(c, dt);
          hn = sigmoid(u[3 * h + j]) * tanh(cs[j]);
          yt[h + j] = cs[j];
        } else if (gru) {
          double z = sigmoid(x[j] + u[j]);
          double pre = before ? u[2 * h + j] : sigmoid(x[h + j] + u[h + j]) * u[2 * h + j];
          hn = z * hs[j] + (1 - z) * tanh(x[2 * h + j] + pre);
        } else {
          hn = tanh(u[j]);
        }
        hs[j] = ref_round(hn, dt);
        yt[j] = hs[j];
      }
    }
  }
  free(hs), free(cs), free(u), free(g);
  return true;
}

/* Backpropagation through time (simple_rnn_grad, gru_grad, lstm_grad), from
 * the forward formulas differentiated by hand, in the plainest order: per
 * batch row, the steps in the reverse of the forward's, each recomputing
 * its gates from xp[:, t] and the state before it (y's, or the initial
 * one). The result per t: [dxp | du | h_{t-1} | p2] (ir_ops.def). */
static bool eval_grad(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count,
                      int64_t batch, char *err, size_t errlen) {
  int gates = ir_rnn_gates(n->op), states = ir_rnn_states(n->op);
  int64_t h = n->srcs[1]->type.dims[0], gh = n->srcs[1]->type.dims[1], tl = n->srcs[0]->type.dims[1];
  int64_t w = ir_rnn_grad_width(n->op, h);
  bool gru = gates == 3, before = gru && !n->attr.reset_after;
  int first_state = gru ? 3 : 2, iy = first_state + states, idy = iy + 1;
  /* y's floats per step: lstm_train's y has the gates after h and c (recomputed here all the same) */
  int64_t yw = n->srcs[iy]->type.rank == 4 ? n->srcs[iy]->type.dims[2] * h : h;
  if (n_src[0] != batch * tl * gh || count != batch * tl * w || n_src[iy] != batch * tl * yw ||
      n_src[idy] != batch * tl * states * h)
    return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
  const double *xp = src[0], *r = src[1], *rb = gru ? src[2] : NULL, *fy = src[iy], *dy = src[idy];
  const double *mask = ir_rnn_mask(n) ? src[idy + 1] : NULL;
  double *hp = calloc((size_t)h, sizeof *hp), *cp = calloc((size_t)h, sizeof *cp), *dh = calloc((size_t)h, sizeof *dh);
  double *dc = calloc((size_t)h, sizeof *dc), *dn = calloc((size_t)h, sizeof *dn), *gg = calloc((size_t)h, sizeof *gg);
  double *u = calloc((size_t)gh, sizeof *u), *du = calloc((size_t)gh, sizeof *du), *dx = calloc((size_t)gh, sizeof *dx);
  int rev = (int)n->attr.reverse;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t j = 0; j < h; j++) dh[j] = dc[j] = 0;
    for (int64_t s = tl - 1; s >= 0; s--) {
      int64_t t = rev ? tl - 1 - s : s, yt = rev == 2 ? s : t;
      int64_t yp = rev == 2 ? s - 1 : rev ? t + 1 : t - 1;
      for (int64_t j = 0; j < h; j++) {
        hp[j] = s ? fy[(b * tl + yp) * yw + j] : src[first_state][b * h + j];
        if (states == 2) cp[j] = s ? fy[(b * tl + yp) * yw + h + j] : src[first_state + 1][b * h + j];
      }
      const double *x = xp + (b * tl + t) * gh;
      for (int64_t j = 0; j < gh; j++) u[j] = gru ? rb[j] : x[j];
      for (int64_t k = 0; k < h; k++)
        for (int64_t j = 0; j < (before ? 2 * h : gh); j++) u[j] += hp[k] * r[k * gh + j];
      if (before) {
        for (int64_t j = 0; j < h; j++) gg[j] = sigmoid(x[h + j] + u[h + j]) * hp[j];
        for (int64_t k = 0; k < h; k++)
          for (int64_t j = 2 * h; j < 3 * h; j++) u[j] += gg[k] * r[k * gh + j];
      }
      const double *dyt = dy + (b * tl + yt) * states * h, *yv = fy + (b * tl + yt) * yw;
      if (mask && mask[b * tl + t] == 0) { /* skipped: h_t = h_{t-1}, c_t = c_{t-1} */
        double *out = y + (b * tl + t) * w;
        for (int64_t j = 0; j < 2 * gh; j++) out[j] = 0;
        for (int64_t j = 0; j < h; j++) {
          dh[j] += dyt[j];
          if (states == 2) dc[j] += dyt[h + j];
          out[2 * gh + j] = hp[j];
          out[2 * gh + h + j] = before ? ref_round(gg[j], n->type.dtype) : hp[j];
        }
        continue;
      }
      for (int64_t j = 0; j < h; j++) {
        double dht = dh[j] + dyt[j];
        dn[j] = 0;
        if (states == 2) {
          double i = sigmoid(u[j]), f = sigmoid(u[h + j]), c = tanh(u[2 * h + j]), o = sigmoid(u[3 * h + j]);
          double tc = tanh(yv[h + j]);
          double dct = dc[j] + dyt[h + j] + dht * o * (1 - tc * tc);
          du[j] = dct * c * i * (1 - i);
          du[h + j] = dct * cp[j] * f * (1 - f);
          du[2 * h + j] = dct * i * (1 - c * c);
          du[3 * h + j] = dht * tc * o * (1 - o);
          dc[j] = dct * f;
          for (int g = 0; g < 4; g++) dx[g * h + j] = du[g * h + j];
        } else if (gru) {
          double z = sigmoid(x[j] + u[j]), g = sigmoid(x[h + j] + u[h + j]);
          double cand = tanh(x[2 * h + j] + (before ? u[2 * h + j] : g * u[2 * h + j]));
          double dz = dht * (hp[j] - cand) * z * (1 - z), dpre = dht * (1 - z) * (1 - cand * cand);
          dx[j] = du[j] = dz;
          dx[2 * h + j] = dpre;
          du[2 * h + j] = before ? dpre : dpre * g;
          if (!before) dx[h + j] = du[h + j] = dpre * u[2 * h + j] * g * (1 - g);
          dn[j] = dht * z;
        } else {
          double hn = tanh(u[j]);
          dx[j] = du[j] = dht * (1 - hn * hn);
        }
      }
      if (before) /* through g h: d(g h)[k] = sum_j du_h[j] r[k, 2H + j] */
        for (int64_t k = 0; k < h; k++) {
          double d = 0;
          for (int64_t j = 0; j < h; j++) d += du[2 * h + j] * r[k * gh + 2 * h + j];
          double g = sigmoid(x[h + k] + u[h + k]);
          dx[h + k] = du[h + k] = d * hp[k] * g * (1 - g);
          dn[k] += d * g;
        }
      for (int64_t k = 0; k < h; k++)
        for (int64_t j = 0; j < (before ? 2 * h : gh); j++) dn[k] += du[j] * r[k * gh + j];
      double *out = y + (b * tl + t) * w;
      for (int64_t j = 0; j < gh; j++) out[j] = ref_round(dx[j], n->type.dtype), out[gh + j] = ref_round(du[j], n->type.dtype);
      for (int64_t j = 0; j < h; j++) {
        out[2 * gh + j] = hp[j];
        out[2 * gh + h + j] = before ? ref_round(gg[j], n->type.dtype) : hp[j];
        dh[j] = dn[j];
      }
    }
  }
  free(hp), free(cp), free(dh), free(dc), free(dn), free(gg), free(u), free(du), free(dx);
  return true;
}
