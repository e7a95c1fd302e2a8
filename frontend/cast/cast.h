/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cast.h: the .cast frontend's entry point, called by the seam
 * (frontend/fe_load.c) once the content says the file is .cast text. The
 * stages behind it are listed in frontend/cast/internal.h.
 */
#ifndef CASTOR_FRONTEND_CAST_H
#define CASTOR_FRONTEND_CAST_H

#include "frontend/frontend.h"

/* Parses, checks and lowers .cast text (fe_load's contract); `file` names
 * it in diagnostics and anchors relative weight paths. `o` is not NULL;
 * *out_defaults (not NULL) receives the `compile` statement. */
ir_graph *fe_cast_load(const char *file, const char *text, size_t len, const fe_options *o,
                       diag_sink *d, fe_train_defaults *out_defaults);

#endif
