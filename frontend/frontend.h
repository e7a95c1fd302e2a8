/*
 * frontend.h: the .cast model language (docs/cast-language.md) and weight
 * loading. Parses and checks a model, loads its weights (safetensors, or a
 * seeded Glorot-uniform init when the model names no weights file) and
 * lowers it to an ir_graph in which every float is f32 and the first
 * dimension of every activation is the symbolic batch N. Per-layer dtype=
 * overrides are kept on the IR nodes (ir_node.policy) for autocast.
 *
 * User errors go to the diagnostics sink as file:line:col with a caret; the
 * functions return NULL on any error. Nothing is printed.
 */
#ifndef CASTOR_FRONTEND_H
#define CASTOR_FRONTEND_H

#include "ir/ir.h"

/* A model's `compile` statement: how it trains (docs/cast-language.md).
 * Empty strings: not given. */
typedef struct fe_compile {
  bool present;
  char loss[48];      /* a Keras loss name */
  char optimizer[16]; /* sgd, rmsprop or adam */
  bool from_logits;
  bool accuracy;      /* metrics=[accuracy] */
} fe_compile;

typedef struct fe_options {
  uint64_t seed;            /* seed of the Glorot init when there is no weights file */
  const char *weights_path; /* overrides the model's `weights` line; NULL: use it */
  fe_compile *compile_out;  /* receives the compile statement, if not NULL */
  int64_t max_init_bytes;   /* cap of the Glorot init (0: 4 GiB; fuzzing lowers it) */
} fe_options;

void fe_options_init(fe_options *o); /* seed 0, no override */

/* `o` may be NULL (fe_options_init's defaults). The returned graph is the
 * caller's (ir_graph_destroy); warnings (unused weights) may accompany it.
 * An unreadable model or weights file is a DIAG_KIND_IO error; every other
 * error is a plain one (DIAG_KIND_UNSPECIFIED: the model is malformed). */
ir_graph *fe_load_file(const char *path, const fe_options *o, diag_sink *d);
/* Largest model file fe_load_file reads: a regular file or a pipe, checked
 * before or while reading (docs/cast-language.md, "Limits"). */
#define FE_MAX_MODEL_BYTES ((int64_t)16 << 20)
/* `file` names the text in diagnostics and anchors relative weight paths. */
ir_graph *fe_load_string(const char *file, const char *text, size_t len, const fe_options *o,
                         diag_sink *d);

#endif
