/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_internal.h: what api/check/check.c (the comparison) hands to
 * api/check/check_format.c (text, JSON and DOT of a report). Not installed.
 */
#ifndef CASTOR_API_CHECK_INTERNAL_H
#define CASTOR_API_CHECK_INTERNAL_H

#include "api/internal.h"

/* One value of a build: a node of its final graph, at the run's batch. */
typedef struct chk_value {
  const char *name, *layer, *weight; /* weight: a constant's weight key; strings in the report's arena */
  ir_op op;
  ir_dtype dtype;
  int rank;
  int64_t dims[IR_MAX_RANK]; /* the batch resolved */
  int64_t numel;
  int src;  /* node id of the first operand, -1 for leaves */
  float *v; /* numel values widened to f32 (heap), NULL for non-float dtypes */
  /* against the float32 build (build under test only) */
  int match; /* index of the float32 build's value, -1: none */
  double max_abs_err, rel_err, share_off;
  int64_t not_finite;
} chk_value;

typedef struct chk_build {
  chk_value *v; /* by node id of the final graph */
  int n;
  int *out_value; /* value index of each model output */
  int n_outputs;
  ir_graph *dot; /* build under test: its final graph, constant data dropped */
} chk_build;

struct castor_check_report {
  arena *arena;
  chk_build test, ref;
  castor_check_layer *layers; /* the reported layers (after the filter) */
  int n_layers;
  castor_check_summary sum;
  castor_check_grad_layer *grads; /* castor_check_train: per layer, in the variables' order */
  int n_grads;
  str_buf text;
};

/* check_format.c */
/* An invalid-argument error with message fmt as the context's last error;
 * returns CASTOR_ERR_INVALID_ARGUMENT. */
castor_status chk_fail(castor_context *ctx, const char *fmt, ...) CASTOR_PRINTF(2, 3);

void chk_format_text(castor_check_report *r, str_buf *out);
void chk_format_json(castor_check_report *r, str_buf *out);
void chk_format_dot(castor_check_report *r, str_buf *out);
/* check_train.c: the gradient report (sum.train) as text and JSON */
void chk_format_train_text(castor_check_report *r, str_buf *out);
void chk_format_train_json(castor_check_report *r, str_buf *out);

#endif
