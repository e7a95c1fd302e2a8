/* SPDX-License-Identifier: Apache-2.0 */
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

#endif
