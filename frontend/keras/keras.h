/*
 * keras.h: the Keras frontend's entry point, called by the seam
 * (frontend/fe_load.c) when the content is a ZIP archive (a Keras 3 .keras
 * file) or an HDF5 file (a legacy Keras .h5 model, refused with the way to
 * re-save it). docs/keras.md is the user's side of it.
 */
#ifndef CASTOR_FRONTEND_KERAS_H
#define CASTOR_FRONTEND_KERAS_H

#include "frontend/frontend.h"

/* Largest .keras file fe_load reads (the archive is read whole; its
 * weights are most of it). */
#define FE_MAX_KERAS_BYTES ((int64_t)8 << 30)

/* Reads a .keras archive (fe_load's contract): config.json lowered to IR,
 * the weights of model.weights.h5 bound to it, the compile_config as
 * *out_defaults (not NULL). `file` names it in diagnostics. */
ir_graph *fe_keras_load(const char *file, const char *bytes, size_t len, const fe_options *o,
                        diag_sink *d, fe_train_defaults *out_defaults);

/* ---- writing back (save.c) ---- */

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

#endif
