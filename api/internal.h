/*
 * internal.h: entry points of the API layer for castor's own tools, not
 * part of the public castor.h (hidden in the shared library).
 *
 * castor_compile_to runs exactly the pipeline castor_compile runs (policy,
 * autocast options, verification) and hands the final graph and the
 * codegen options castor_compile would use to fn instead of JIT-compiling
 * it. `castor build` uses it so that JIT and AOT compile the same graph.
 */
#ifndef CASTOR_API_INTERNAL_H
#define CASTOR_API_INTERNAL_H

#include "castor.h"
#include "codegen/codegen.h"

/* Returns CASTOR_OK or the status of the failure, with diagnostics in d. */
typedef castor_status (*castor_codegen_fn)(const ir_graph *g, const cg_options *co, void *arg,
                                           diag_sink *d);

/* Diagnostics of a failure (fn's included) become the context's last error. */
castor_status castor_compile_to(castor_model *m, const castor_compile_options *opts,
                                castor_codegen_fn fn, void *fn_arg);

#endif
