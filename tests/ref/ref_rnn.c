/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ref_rnn.c: the float64 reference of the recurrent ops (simple_rnn, gru,
 * lstm), written from ir_ops.def's formulas in the plainest loops: every
 * batch row, every step in time order (or reversed with {reverse}), the
 * recurrent product summed over k in order, the gates, the new state
 * rounded to the op's dtype at every step (as the kernel keeps a 16-bit
 * layer's state: codegen/kernel/cg_rnn.c), y aligned with the input (or,
 * {reverse}=2, in the order of the steps).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/ref/ref.h"

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), false)

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

bool ref_eval_rnn(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count, int64_t batch,
                  char *err, size_t errlen) {
  int gates = ir_rnn_gates(n->op), states = ir_rnn_states(n->op);
  int64_t h = n->srcs[1]->type.dims[0], gh = n->srcs[1]->type.dims[1], t_len = n->srcs[0]->type.dims[1];
  ir_dtype dt = n->type.dtype;
  bool gru = gates == 3;
  int first_state = gru ? 3 : 2;
  if (n_src[0] != batch * t_len * gh || n_src[1] != h * gh || count != batch * t_len * states * h ||
      n_src[first_state] != batch * h || (states == 2 && n_src[first_state + 1] != batch * h))
    return FAIL("%s %%%s: inconsistent sizes", ir_op_name(n->op), n->name);
  const double *xp = src[0], *r = src[1], *rb = gru ? src[2] : NULL;
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
      double *yt = y + (b * t_len + (n->attr.reverse == 2 ? s : t)) * states * h;
      for (int64_t j = 0; j < h; j++) {
        double hn;
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
