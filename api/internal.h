/* SPDX-License-Identifier: Apache-2.0 */
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
#include "codegen/cg_backend.h"

/* What the CLI adds to castor_compile_options (castor dump). */
typedef struct castor_driver_options {
  const char *passes;     /* pipeline instead of the target's (NULL) */
  const char *dump_after; /* print the IR after this pass, or "all" (NULL) */
  const char *dump_dir;   /* write those dumps to DIR/NN.after-PASS.cir (NULL: to dump_out) */
  str_buf *dump_out;      /* where dumps go without dump_dir (NULL: nowhere) */
  bool verify_each;       /* verify after every pass (also castor_compile_options.verify_each) */
  const castor_train_options *train; /* compile the training step (castor_compile_train), or NULL */
  bool loss_only;                    /* with train: the evaluation program (castor_compile_eval) */
  bool gradients;                    /* with train: optimizer none, whatever train says: the outputs are
                                      * the model's, "loss", then grad_<weight key, '.' as '_'> per
                                      * weight, in the variables' order (castor check --train) */
} castor_driver_options;

void castor_driver_options_init(castor_driver_options *o);

/* ---- the table of backends (backends.c) ---- */

/* The backend of a public target, NULL if this build has none. */
const cg_backend *castor_target_backend(castor_target t);
/* The backend called name (its length n), or NULL. */
const cg_backend *cg_backend_find(const char *name, size_t n);
/* Backend names, comma-separated ("cpu, cuda"), for messages. */
const char *cg_backend_names(void);
/* Every backend of the build, in table order: i in [0, castor_backend_count()). */
int castor_backend_count(void);
const cg_backend *castor_backend_at(int i);

/* Receives the final graph, the target's backend and the options the
 * backend would compile with. Returns CASTOR_OK or the status of the
 * failure, with diagnostics in d. */
typedef castor_status (*castor_codegen_fn)(const ir_graph *g, const cg_backend *be, const cg_backend_options *bo,
                                           void *arg, diag_sink *d);

/* Runs exactly castor_compile's pipeline (dopts may be NULL) and hands the
 * final graph to fn instead of compiling it. Diagnostics of a failure (fn's
 * included) become the context's last error, warnings the last warnings. */
castor_status castor_compile_to(castor_model *m, const castor_compile_options *opts,
                                const castor_driver_options *dopts, castor_codegen_fn fn, void *fn_arg);

/* Compiles m like castor_compile with the driver's options (train,
 * gradients); a program as castor_compile returns it. */
castor_status castor_compile_driver(castor_model *m, const castor_compile_options *opts,
                                    const castor_driver_options *dopts, castor_program **out_program);

/* What castor dump prints of a compiled model. */
typedef enum castor_emit {
  CASTOR_EMIT_IR,    /* the final IR, text form */
  CASTOR_EMIT_CASTS, /* the cast report (passes.h, pass_cast_report) */
  CASTOR_EMIT_LLVM,  /* the target's optimized LLVM IR */
  CASTOR_EMIT_PTX,   /* PTX (the cuda target) */
  CASTOR_EMIT_DOT,   /* the final IR as Graphviz DOT (ir_print_dot) */
  CASTOR_EMIT_SUMMARY, /* layers, output shapes, parameters, bytes (castor_summary_print) */
} castor_emit;

/* castor summary (api/summary.c): per layer of `model` (the frontend's
 * graph) its main op, output shape, parameters and, from `compiled` (the
 * final graph under the policy), its compute dtype and weight bytes; then
 * the totals. */
void castor_summary_print(const ir_graph *model, const ir_graph *compiled, str_buf *out);

/* Compiles m like castor_compile (through castor_compile_to) and appends
 * `what` to out; dumps that dopts asks for go to their place first. */
castor_status castor_model_dump(castor_model *m, const castor_compile_options *opts,
                                const castor_driver_options *dopts, castor_emit what, str_buf *out);

/* castor_tensor_load_npy; with to_f32, float16 and integer arrays are
 * converted to float32 too (castor run's inputs), as npy_to_f32 does. */
castor_status castor_tensor_load_npy_as(castor_context *ctx, const char *path, bool to_f32,
                                        castor_tensor **out_tensor);

/* The one-line summary castor run prints of a tensor (runtime.h's
 * rt_tensor_summary: min, max, mean, argmax). */
void castor_tensor_summary(const castor_tensor *t, const char *name, str_buf *out);
/* Whether t (a float tensor) holds NaN or Inf; if so appends their counts
 * to out ("3 NaN, 1 +Inf"). */
bool castor_tensor_nonfinite(const castor_tensor *t, str_buf *out);

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

/* ---- profiles (castor run --profile; api/profile.c) ---- */

/* Runs p `runs` times on inputs with each kernel launch timed into prof
 * (runtime.h's events, appended); *out_ms the wall time of the runs, as
 * the API measures them around the backend's run, *out_batch their batch.
 * CASTOR_ERR_UNSUPPORTED on a backend that cannot time launches one by
 * one (cuda) and for a training program. */
castor_status castor_program_profile_runs(castor_program *p, castor_tensor *const *inputs, int n_inputs, int runs,
                                         rt_profile *prof, double *out_ms, int64_t *out_batch);
/* p's runtime description (launch names, layers, flops, bytes) and the
 * threads a run uses. */
const rt_program *castor_program_desc(const castor_program *p);
int castor_program_threads(const castor_program *p);
/* Profiles p over `runs` runs (castor_program_profile_runs) and appends
 * to table the per-kernel and per-layer table castor run --profile prints
 * (each one's mean time a run, its share of the measured run time,
 * GFLOP/s and bytes moved), and, if trace is not NULL, the runs as a
 * Chrome trace (JSON: traceEvents of ph "X", ts and dur in microseconds),
 * which Perfetto and chrome://tracing open. */
castor_status castor_program_profile(castor_program *p, castor_tensor *const *inputs, int n_inputs, int runs,
                                     str_buf *table, str_buf *trace);

/* What one CPU run of p at `batch` costs (castor run --stats, --repeat). */
typedef struct castor_run_stats {
  int64_t weight_bytes;    /* constant data as the program stores it (packed weights) */
  int64_t workspace_bytes; /* scratch activations: the liveness-shared slots (and, when a CPU run
                            * goes by image on several threads, each other thread's slots of
                            * its passes: rt_program_pass_bytes) */
  int64_t io_bytes;        /* input and output tensors */
  int64_t thread_scratch_bytes; /* per thread: the GEMM's packed-A block and C tile */
  int64_t flops;           /* of the matmuls */
  int threads;             /* threads a run uses */
  int64_t images;          /* a CPU run by image: the images (rt_program.images), else 0 */
  int image_launches, launches; /* the launches it runs by image, of all its launches */
  const char *note;        /* NULL, or why the code is not what the options asked for (the
                            * AMX family refused: the FMA family runs); the program's */
} castor_run_stats;
castor_status castor_program_stats(const castor_program *p, int64_t batch, castor_run_stats *out);

/* For API entry points in other files of api/ (check.c): the model's
 * context, its diagnostics sink, and the start and end of an API call as
 * castor.c makes them (begin clears the last error and warnings; finish
 * keeps the sink's text as the last error, or as the warnings on success). */
castor_context *castor_model_context(const castor_model *m);
bool castor_model_is_keras(const castor_model *m); /* loaded from a .keras file: castor_program_save_keras can write it */

/* The writer a save path names by its extension, case-insensitively:
 * .keras a Keras 3 model (castor_program_save_keras), .safetensors or no
 * extension the weights (castor_program_save_weights); any other (.h5,
 * .npy, ...) none of castor's. */
typedef enum castor_save_format { CASTOR_SAVE_WEIGHTS, CASTOR_SAVE_KERAS, CASTOR_SAVE_UNKNOWN } castor_save_format;
castor_save_format castor_save_format_of(const char *path);
/* Checks, before training, that m can be saved at path in the format its
 * name says: a known extension, and for .keras a model loaded from a
 * .keras file whose weights file castor can write back. The error is the
 * context's last error (CASTOR_ERR_INVALID_ARGUMENT or _UNSUPPORTED). */
castor_status castor_model_check_save(castor_model *m, const char *path);
/* The loss the model says it trains with (a .cast compile statement, a
 * .keras file's compile config), or NULL: for messages about labels. */
const char *castor_model_loss(const castor_model *m);
const ir_graph *castor_model_graph(const castor_model *m); /* the frontend's graph: name, policy */
diag_sink *castor_context_diag(castor_context *ctx);
void castor_context_begin(castor_context *ctx);
castor_status castor_context_finish(castor_context *ctx, castor_status st);

/* ---- training options (api/train_opts.c) ---- */

struct pass_train_options;
struct rt_lr_schedule;
/* Checks castor_train_options' Keras optimizer fields (beta_1 ...
 * lr_schedule; castor.h gives each range) and sets the grad pass's from
 * them; false with an error naming the field and its range. */
bool castor_train_opts_apply(const castor_train_options *t, struct pass_train_options *o, diag_sink *d);
/* The learning-rate schedule t asks for (kind RT_LR_CONSTANT when none),
 * its arrays copied; t checked by castor_train_opts_apply first. */
void castor_train_opts_schedule(const castor_train_options *t, double default_lr, struct rt_lr_schedule *out);

#endif
