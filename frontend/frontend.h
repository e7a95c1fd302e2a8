/* SPDX-License-Identifier: Apache-2.0 */
/*
 * frontend.h: the seam between model files and the rest of castor. fe_load
 * picks the frontend by the file's content (never its name), and every
 * frontend returns the same thing: an ir_graph in which every float is f32
 * and the first dimension of every activation is the symbolic batch N (per
 * layer dtype= overrides kept on the nodes as ir_node.policy for autocast),
 * plus the model's training defaults in frontend-neutral terms.
 *
 * Frontends live below this folder, one per language: cast/ (the .cast
 * model language, docs/cast-language.md), keras/ (Keras 3 .keras
 * archives, docs/keras.md) and onnx/ (ONNX ModelProto files, docs/onnx.md).
 * Legacy Keras .h5 files are refused with how to re-save them.
 *
 * Sniffing rule (fe_sniff), on the first bytes:
 *   "PK\x03\x04"             a ZIP archive: a Keras v3 model (.keras)
 *   "\x89HDF\r\n\x1a\n"      an HDF5 file: a legacy Keras model (.h5), refused
 *   0x08                     a protobuf whose first field is varint field 1:
 *                            an ONNX ModelProto (ir_version comes first)
 *   anything else            .cast text (its lexer reports non-text bytes)
 * No .cast model can start with these bytes: they are not text.
 *
 * User errors go to the diagnostics sink as file:line:col with a caret; the
 * functions return NULL on any error. Nothing is printed.
 */
#ifndef CASTOR_FRONTEND_H
#define CASTOR_FRONTEND_H

#include "ir/ir.h"

/* How the model says it trains, whatever the language (.cast's `compile`
 * statement; Keras' training config later). Empty strings: not given. */
typedef struct fe_train_defaults {
  bool present;       /* the model states any */
  char loss[48];      /* a Keras loss name */
  char optimizer[16]; /* sgd, rmsprop or adam */
  bool from_logits;
  bool accuracy;      /* metrics=[accuracy] */
  /* Keras's compile_config (0 / false / empty: not given) */
  double learning_rate;
  double momentum;    /* sgd, rmsprop */
  bool nesterov;      /* sgd */
  bool centered;      /* rmsprop */
  char loss_scale[16]; /* "dynamic": a LossScaleOptimizer */
  /* Keras optimizer arguments castor_train_options has (0: Keras's default) */
  double beta_1, beta_2, epsilon, weight_decay;
  double loss_scale_initial;
  int64_t loss_scale_growth_steps;
  double clipnorm, clipvalue, global_clipnorm;
  char lr_schedule[32];          /* "": none; exponential_decay, cosine_decay, piecewise_constant_decay */
  int64_t decay_steps;
  double decay_rate, alpha, warmup_target;
  bool staircase;
  int64_t warmup_steps;
  int64_t boundaries[64];
  int n_boundaries;
  double values[65];
  int n_values;
  /* a .keras model output that carries Keras's mask, in words ("" if none): Keras weights the
   * loss by it, castor's training does not, so it refuses to train such a model */
  char masked_output[192];
} fe_train_defaults;

struct onnx_tensor; /* formats/onnx.h */

/* A graph input bound to data at import (ONNX: a shape, axes or bounds
 * given as an input): the frontend uses the data as a constant. */
typedef struct fe_binding {
  const char *name;
  const struct onnx_tensor *tensor;
  bool where_needed; /* a float input stays a run-time input; the data serves ops that need
                      * its value at compile time */
} fe_binding;

typedef struct fe_options {
  uint64_t seed;            /* seed of the Glorot init when there is no weights file */
  const char *weights_path; /* overrides the model's weights; NULL: use the model's */
  int64_t max_init_bytes;   /* cap of the Glorot init (0: 4 GiB; fuzzing lowers it) */
  /* ONNX: the folder external data is read from (beneath it, no links
   * followed). fe_load sets it to the folder of a model read from a regular
   * file, and to NULL for one read from a pipe; for fe_load_mem it is the
   * caller's (NULL, the default: external data is an error) */
  const char *dir;
  const fe_binding *bindings; /* ONNX: graph inputs bound to data (NULL: none) */
  int n_bindings;
  /* ONNX: symbolic dimensions bound at import (castor_load_options): the
   * batch (> 0) for a symbolic first dimension, and dim_param names */
  int64_t batch;
  const char *const *dim_names;
  const int64_t *dim_values;
  int n_dims;
  /* .keras: if not NULL, receives what writing the model back as a .keras
   * file needs (frontend/keras/keras.h, fe_keras_save; NULL for other
   * formats); the caller destroys it with fe_keras_source_destroy (below) */
  struct fe_keras_source **keras_source;
} fe_options;

void fe_options_init(fe_options *o); /* seed 0, no override */

typedef enum fe_format {
  FE_FORMAT_CAST,  /* .cast text */
  FE_FORMAT_KERAS, /* .keras (ZIP) or legacy .h5 (HDF5) */
  FE_FORMAT_ONNX,  /* .onnx (protobuf) */
} fe_format;

/* The frontend for a file that starts with bytes[0..len) (the rule above). */
fe_format fe_sniff(const void *bytes, size_t len);

/* Largest .cast model file fe_load reads: a regular file or a pipe, checked
 * before or while reading (docs/cast-language.md, "Limits"). A .keras
 * file has its own limit (frontend/keras/keras.h). */
#define FE_MAX_MODEL_BYTES ((int64_t)16 << 20)

/* Loads the model file at path with the frontend its content selects.
 * `o` may be NULL (fe_options_init's defaults); `out_defaults`, if not
 * NULL, receives the model's training defaults (zeroed when it states
 * none). The returned graph is the caller's (ir_graph_destroy); warnings
 * (unused weights) may accompany it. An unreadable model or weights file is
 * a DIAG_KIND_IO error, a file of a frontend castor lacks a
 * DIAG_KIND_UNSUPPORTED one; every other error is a plain one
 * (DIAG_KIND_UNSPECIFIED: the model is malformed). */
ir_graph *fe_load(const char *path, const fe_options *o, diag_sink *d,
                  fe_train_defaults *out_defaults);
/* The same over a file's bytes in memory. `name` names it in diagnostics
 * and anchors relative weight paths. */
ir_graph *fe_load_mem(const char *name, const char *bytes, size_t len, const fe_options *o,
                      diag_sink *d, fe_train_defaults *out_defaults);

/* ---- writing a .keras model back (frontend/keras/save.c) ---- */

/* What a loaded .keras model keeps to be written back: its config.json
 * as it was, its Keras version, its model.weights.h5 (every group and
 * attribute, and the datasets no weight replaces), and which dataset
 * holds which weight key, in Keras's variable order. */
typedef struct fe_keras_source fe_keras_source;
void fe_keras_source_destroy(fe_keras_source *s);

/* A named tensor of a trained program's state: a weight key
 * ("dense.kernel"), a slot ("dense.kernel.momentum") or an optimizer
 * scalar ("optimizer.iterations", "optimizer.learning_rate",
 * "optimizer.loss_scale", "optimizer.good_steps"). */
typedef struct fe_keras_state {
  const char *name;
  dtype_id dtype;
  int rank;
  const int64_t *dims;
  const void *data;
  bool trainable; /* a trainable weight (its slots follow Keras's order) */
} fe_keras_state;

/* Writes the model as a .keras archive at path (atomically): the same
 * config.json, a metadata.json as Keras writes it, and a model.weights.h5
 * (formats/hdf5.h's writer) with each weight from states in its dataset's
 * type, and, when the source file has an optimizer group, the optimizer's
 * variables where Keras 3 keeps them for `optimizer` (castor's: sgd,
 * rmsprop, adam, adamw), with a learning-rate variable unless `schedule`.
 * docs/keras.md, "Writing .keras files", has the layout. */
bool fe_keras_save(const fe_keras_source *src, const char *path, const fe_keras_state *states, int n_states,
                   const char *optimizer, bool schedule, diag_sink *d);
/* What fe_keras_save would refuse of the loaded file whatever the states
 * (an attribute that is not a string, a string dataset), checked before
 * training so that no training is lost at the save; errors at path. */
bool fe_keras_save_check(const fe_keras_source *src, const char *path, diag_sink *d);

/* Reads the optimizer's variables of the loaded file back into the states
 * they are (fe_keras_save's layout for `optimizer`, inverted): each state's
 * data (writable, its dtype and shape) and loaded[i] set for those read;
 * skip_lr leaves optimizer.learning_rate. A file without an optimizer
 * group, or with only its scalars (saved before Keras built the slots),
 * loads nothing; a count or shape that does not match, a negative count
 * (iterations), a learning rate or loss scale that is not positive, or a
 * value that is not finite is an error naming the dataset and the
 * variable. */
bool fe_keras_load_optimizer(const fe_keras_source *src, const fe_keras_state *states, int n_states,
                             const char *optimizer, bool schedule, bool skip_lr, bool *loaded, int *n_loaded,
                             diag_sink *d);

#endif
