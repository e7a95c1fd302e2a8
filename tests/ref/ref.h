/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ref.h: the float64 reference interpreter, the oracle of every numeric test.
 *
 * It runs an ir_graph straight from the IR, one node at a time in schedule
 * order, every value held as float64: matmul sums in double whatever its
 * {acc}, transcendental functions come from libm in double. The only
 * rounding it models is storage: a value whose dtype is f16 or bf16 is
 * rounded (once, to nearest even, straight from double) to that dtype after
 * it is computed, and a cast rounds to its target dtype. f32 values are NOT
 * rounded to f32: the oracle is the exact-math answer to within double
 * precision, and the implementation's f32 error is what the tests measure.
 *
 * It is slow and simple on purpose; it shares no code with codegen.
 */
#ifndef CASTOR_REF_H
#define CASTOR_REF_H

#include "ir/ir.h"

/* Runs g for `batch` rows. inputs[i] is graph input number i (the INPUT node
 * with attr.input.index == i), row-major, with `batch` rows if its type is
 * batched; values are read as doubles (and rounded if the input's dtype is
 * f16/bf16). On success out_outputs[k] receives a malloc'ed row-major array
 * for graph output k (caller frees each, e.g. ref_outputs_free). On failure
 * (an op or dtype it cannot run, a const without data, a missing input, a
 * malformed schedule) returns false with a message in err and no outputs. */
bool ref_run(const ir_graph *g, int64_t batch, const double *const *inputs,
             double **out_outputs, char *err, size_t errlen);
void ref_outputs_free(double **outputs, int n);

/* The persistent state of a training program (its VARIABLE nodes), by
 * weight name, as doubles. ref_state_init makes one entry per variable: its
 * data if it has some (attr.data, as a const's), else every element = its
 * {init}. */
typedef struct ref_state {
  int n;
  const char **names;
  double **values;
  int64_t *counts;
} ref_state;
void ref_state_init(ref_state *s, const ir_graph *g);
/* The values of variable `name` (NULL if none), their count in *count. */
double *ref_state_get(ref_state *s, const char *name, int64_t *count);
void ref_state_fini(ref_state *s);

/* ref_run for a program with variables: VARIABLE nodes read state, and
 * update ops write it (rounded to the variable's dtype if 16-bit), so one
 * call is one training step. state may be NULL for a graph without them. */
bool ref_run_state(const ir_graph *g, int64_t batch, const double *const *inputs, ref_state *state,
                   double **out_outputs, char *err, size_t errlen);

/* Storage rounding of one value to a dtype: f32 -> (double)(float)x, f16 and
 * bf16 -> nearest even straight from double (overflow to inf, subnormals,
 * NaN kept), others -> x unchanged. Exposed for tests. */
double ref_round(double x, ir_dtype dtype);

/* ---- converting test data (results malloc'ed, caller frees) ---- */

double *ref_from_f32(const float *x, int64_t n);
double *ref_from_f16(const uint16_t *x, int64_t n);
double *ref_from_bf16(const uint16_t *x, int64_t n);

/* ---- comparing an implementation's output with the oracle ----
 * NaN handling: a NaN where the oracle has a number (or the reverse), or a
 * wrong infinity, is an infinite error; matching NaNs or infinities count 0. */

typedef struct ref_cmp {
  double error;  /* the metric: max over elements (0 when n == 0) */
  int64_t index; /* worst element, -1 when n == 0 */
  double got, want;
} ref_cmp;

/* Max over i of |got - want| / max(|want|, floor). */
ref_cmp ref_compare_rel(const float *got, const double *want, int64_t n, double floor);
/* max |got - want| / max |want| (over all elements; denominator 1 if the
 * oracle is all zeros). index is the element with the largest |got - want|. */
ref_cmp ref_compare_normalized(const float *got, const double *want, int64_t n);

double ref_max_rel_error(const float *got, const double *want, int64_t n, double floor);
double ref_normalized_error(const float *got, const double *want, int64_t n);

/* "error 3.1e-04 at [17]: got 0.51234, want 0.51218" for assertion
 * messages; returns buf. */
const char *ref_cmp_str(const ref_cmp *c, char *buf, size_t len);

/* general tensors (ref_tensor.c): dropout, dropout_train; eval's case for
 * them (src, n_src: the operands' values and counts). */
bool ref_eval_tensor(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count,
                     int64_t batch, char *err, size_t errlen);
#define CASTOR_REF_TENSOR_OPS case IR_OP_DROPOUT: case IR_OP_DROPOUT_TRAIN: \
  case IR_OP_REDUCE_SUM: case IR_OP_REDUCE_MEAN: case IR_OP_REDUCE_MAX: case IR_OP_REDUCE_MIN: \
  case IR_OP_REDUCE_MAX_GRAD: case IR_OP_REDUCE_MIN_GRAD: case IR_OP_BROADCAST_TO: \
  case IR_OP_LOG_SOFTMAX: case IR_OP_LOG_SOFTMAX_GRAD:
/* recurrent layers (ref_rnn.c): simple_rnn, gru, lstm */
bool ref_eval_rnn(const ir_node *n, double *const *src, const int64_t *n_src, double *y, int64_t count, int64_t batch,
                  char *err, size_t errlen);
#define CASTOR_REF_RNN_OPS                                                                                          \
  case IR_OP_SIMPLE_RNN: case IR_OP_GRU: case IR_OP_LSTM: case IR_OP_SIMPLE_RNN_GRAD: case IR_OP_GRU_GRAD:          \
  case IR_OP_LSTM_GRAD: case IR_OP_LSTM_TRAIN:

#endif
