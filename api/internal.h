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

/* The status for a stage that failed with diagnostics in d: the one its
 * first error's kind names (DIAG_KIND_IO: CASTOR_ERR_IO, INVALID_MODEL:
 * CASTOR_ERR_PARSE, and so on, one status per kind), or `fallback` when that
 * error has no kind (a plain diag_error) or there is no error. */
castor_status castor_status_from_diag(const diag_sink *d, castor_status fallback);

/* Times p on inputs (their batch): `warmup` untimed runs, then `iters`
 * timed ones, out_ms[i] receiving run i's milliseconds. CUDA: device time
 * of the kernel launches alone (CUDA events; inputs copied once, outputs
 * not copied back); CPU: wall-clock time of castor_program_run's work. */
castor_status castor_program_time(castor_program *p, castor_tensor *const *inputs, int n_inputs, int warmup,
                                  int iters, double *out_ms);

/* What one CPU run of p at `batch` costs (castor run --stats, --repeat). */
typedef struct castor_run_stats {
  int64_t weight_bytes;    /* constant data as the program stores it (packed weights) */
  int64_t workspace_bytes; /* scratch activations: the liveness-shared slots */
  int64_t io_bytes;        /* input and output tensors */
  int64_t thread_scratch_bytes; /* per thread: the GEMM's packed-A block and C tile */
  int64_t flops;           /* of the matmuls */
  int threads;             /* threads a run uses */
} castor_run_stats;
castor_status castor_program_stats(const castor_program *p, int64_t batch, castor_run_stats *out);

#endif
