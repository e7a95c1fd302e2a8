/* SPDX-License-Identifier: Apache-2.0 */
/*
 * castor.h: the public C API of castor, a graph compiler for small neural
 * network models. This is the only installed header.
 *
 *   castor_context *ctx;  castor_model *m;  castor_program *p;
 *   castor_context_create(&ctx);
 *   castor_model_load_file(ctx, "mnist_mlp.cast", NULL, &m);   (NULL: default load options)
 *   castor_compile_options o;  castor_compile_options_init(&o);
 *   castor_compile(m, &o, &p);
 *   ... castor_tensor_create, castor_program_run ...
 *
 * Every function returns a castor_status; on failure the context keeps the
 * full diagnostic text (file:line:col: error: ...), see
 * castor_context_last_error. Handles are opaque; each _destroy accepts NULL.
 * A context and what it created must be used from one thread at a time.
 */
#ifndef CASTOR_H
#define CASTOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CASTOR_VERSION_MAJOR 0
#define CASTOR_VERSION_MINOR 1
#define CASTOR_VERSION_PATCH 0
/* the version's one home: CMakeLists.txt reads the three numbers above */
#define CASTOR_VERSION_STR_(a, b, c) #a "." #b "." #c
#define CASTOR_VERSION_XSTR_(a, b, c) CASTOR_VERSION_STR_(a, b, c)
#define CASTOR_VERSION_STRING \
  CASTOR_VERSION_XSTR_(CASTOR_VERSION_MAJOR, CASTOR_VERSION_MINOR, CASTOR_VERSION_PATCH)

/* The most dimensions a tensor has (a batch dimension included). */
#define CASTOR_MAX_RANK 6

#if defined(_WIN32)
#define CASTOR_API
#elif defined(__GNUC__)
#define CASTOR_API __attribute__((visibility("default")))
#else
#define CASTOR_API
#endif

typedef enum castor_status {
  CASTOR_OK = 0,
  CASTOR_ERR_INVALID_ARGUMENT, /* API misuse: NULL handle, bad index, wrong shape/dtype */
  CASTOR_ERR_PARSE,            /* the model text or weights are malformed */
  CASTOR_ERR_IO,               /* a file could not be read or written */
  CASTOR_ERR_UNSUPPORTED,      /* valid, but not supported (target, dtype) */
  CASTOR_ERR_CODEGEN,          /* LLVM failed */
  CASTOR_ERR_DEVICE,           /* the device (CPU runtime, CUDA) failed */
  CASTOR_ERR_NOMEM,            /* an allocation the caller sized failed */
  CASTOR_ERR_INTERNAL          /* a bug in castor: please report it */
} castor_status;

/* Static text naming a status, e.g. "CASTOR_ERR_PARSE: malformed model". */
CASTOR_API const char *castor_status_string(castor_status s);
/* "0.1.0 (LLVM 19.1.7)" */
CASTOR_API const char *castor_version(void);

typedef enum castor_dtype {
  CASTOR_F32 = 0,
  CASTOR_F16,
  CASTOR_BF16,
  CASTOR_I32,
  CASTOR_I64,
  CASTOR_BOOL
} castor_dtype;

CASTOR_API const char *castor_dtype_name(castor_dtype t); /* "f32" */
CASTOR_API size_t castor_dtype_size(castor_dtype t);

typedef struct castor_context castor_context;
typedef struct castor_model castor_model;
typedef struct castor_program castor_program;
typedef struct castor_tensor castor_tensor;

/* ---- context ---- */

CASTOR_API castor_status castor_context_create(castor_context **out_ctx);
/* Destroys the context. Models, programs and tensors created from it must
 * be destroyed first. */
CASTOR_API void castor_context_destroy(castor_context *ctx);
/* Diagnostics of the last failed call, "" if it succeeded; owned by ctx,
 * valid until the next call on ctx. */
CASTOR_API const char *castor_context_last_error(const castor_context *ctx);
/* Warnings of the last call (e.g. weights that overflow float16), "" if none. */
CASTOR_API const char *castor_context_last_warnings(const castor_context *ctx);

/* ---- models ---- */

typedef struct castor_load_options {
  uint64_t seed;            /* Glorot init seed when the model names no weights file (0) */
  const char *weights_path; /* overrides the model's `weights` line (NULL) */
  /* ONNX models: graph inputs bound to data, by name (NULL, 0: none). An op
   * that needs an input's value at compile time (Reshape's shape, Slice's
   * bounds, Clip's min and max, ...) reads it from here; castor compiles
   * fixed shapes. bind_tensors[i] binds the input named bind_names[i]; the
   * tensors are copied during the load. */
  const char *const *bind_names;
  castor_tensor *const *bind_tensors;
  int n_binds;
  /* 0 (default): a bound input is a constant everywhere and no longer an
   * input of the program. 1: a bound float, int64, int32 or bool input
   * stays an input of the program and is a constant only where an op needs
   * its value at compile time (ONNX's node tests bind every input this
   * way). */
  int bind_where_needed;
  /* ONNX models: symbolic dimensions bound at load, so that the importer
   * sees static shapes (docs/shapes.md). batch > 0 binds the first
   * dimension of every graph input whose first dimension is symbolic (the
   * same value as castor_compile_options.batch; the CLI's --batch sets
   * both); 0 (default) keeps it castor's symbolic batch N. dim_names[i] =
   * dim_values[i] (>= 1) binds the dim_param dim_names[i] (an ONNX
   * symbolic dimension such as "sequence") wherever a graph input declares
   * it; it takes precedence over batch. A name no graph input declares, a
   * value < 1, or NULL arrays with n_dims > 0 are CASTOR_ERR_INVALID_ARGUMENT.
   * Other model formats have no named dimensions: n_dims must be 0, and
   * batch is bound by castor_compile. */
  int64_t batch;
  const char *const *dim_names;
  const int64_t *dim_values;
  int n_dims;
} castor_load_options;

CASTOR_API void castor_load_options_init(castor_load_options *o);

/* Loads a model: .cast text or a Keras 3 .keras archive, chosen by the
 * file's content (docs/keras.md). opts may be NULL (defaults). Returns
 * CASTOR_ERR_IO if the file cannot be read, CASTOR_ERR_PARSE for malformed
 * text, archives or weights, CASTOR_ERR_UNSUPPORTED for a format or a
 * Keras layer, policy or training option castor does not implement. */
CASTOR_API castor_status castor_model_load_file(castor_context *ctx, const char *path,
                                                const castor_load_options *opts,
                                                castor_model **out_model);
/* Same from memory; `name` is used in diagnostics and anchors relative
 * weight paths. The text is copied. A model from memory has no folder: an
 * ONNX model whose tensors keep their data in external files is an error
 * (CASTOR_ERR_PARSE); load it from its file. */
CASTOR_API castor_status castor_model_load_string(castor_context *ctx, const char *name,
                                                  const char *text, size_t len,
                                                  const castor_load_options *opts,
                                                  castor_model **out_model);
CASTOR_API void castor_model_destroy(castor_model *m);

/* ---- compilation ---- */

typedef enum castor_target {
  CASTOR_TARGET_CPU = 0, /* JIT for this host's CPU */
  CASTOR_TARGET_CUDA     /* PTX for an NVIDIA GPU (sm_80 or newer), run through the CUDA driver */
} castor_target;

typedef struct castor_compile_options {
  castor_target target; /* CASTOR_TARGET_CPU (default) or CASTOR_TARGET_CUDA */
  const char *policy;   /* overrides the model's policy; NULL keeps it */
  int opt_level;        /* LLVM optimization level 0-3 (2) */
  int verify_each;      /* run the IR verifier after every pass (0) */
  /* Autocast (mixed precision). The policy decides each layer's compute
   * dtype as in Keras; softmax and model outputs stay float32; matmuls
   * accumulate in float32. */
  const char *fp32_ops;    /* comma-separated IR op names forced to f32, e.g. "gelu,add" (NULL) */
  const char *fp32_layers; /* comma-separated layer names forced to f32 (NULL) */
  int keep_16bit_outputs;  /* leave 16-bit model outputs 16-bit (0: outputs are f32) */
  int pad8;                /* pad 16-bit matmuls to multiples of 8 (always on for CUDA; 0 on the CPU) */
  /* CUDA target. castor_compile opens the device (no GPU or driver:
   * CASTOR_ERR_DEVICE with one clear message) and compiles for its
   * architecture unless sm is set. */
  int device;     /* device index; -1 (default): $CASTOR_DEVICE, else 0 */
  const char *sm; /* PTX architecture, e.g. "sm_90" (NULL: the device's) */
  /* CPU target: threads each run uses, the caller's included (0, default:
   * $CASTOR_NUM_THREADS, else every online CPU; a $CASTOR_NUM_THREADS that
   * is not a whole number from 1 to 1024 makes castor_compile fail with
   * CASTOR_ERR_INVALID_ARGUMENT). Results are bit-identical whatever the
   * count. */
  int threads;
  /* CPU target: the CPU to compile for, by name: "x86-64" (SSE2),
   * "x86-64-v2" (SSE4.2), "x86-64-v3" (AVX2, FMA, F16C), "x86-64-v4"
   * (AVX-512), "haswell", "znver3", "skylake-avx512", "znver4", "cooperlake",
   * "sapphirerapids", "sapphirerapids-amx" (the AMX-BF16 GEMM family, named
   * only and not yet run on an AMX host: docs/numerics.md), or "host".
   * NULL (default): $CASTOR_CPU, else this host's CPU. A name stands for a
   * fixed feature set, so an AVX-512 host can run the AVX2 and SSE code
   * paths; an unknown name, or a CPU whose features this host lacks, is
   * CASTOR_ERR_INVALID_ARGUMENT. Ignored by the cuda target. */
  const char *cpu;
  /* The batch, bound (CLI: --batch B): every symbolic N of the model becomes
   * `batch` and the program is compiled with static shapes, so it runs on
   * exactly `batch` rows. Only the batch N is symbolic in castor (a model
   * with a variable sequence length is compiled once per length); a model
   * whose ops would move N out of the first dimension (a reshape to
   * [N*heads, T, d]) compiles only this way. 0 (default): N stays
   * symbolic; negative: CASTOR_ERR_INVALID_ARGUMENT. */
  int64_t batch;
} castor_compile_options;

CASTOR_API void castor_compile_options_init(castor_compile_options *o);

/* Compiles a model. The program does not refer to the model afterwards. */
CASTOR_API castor_status castor_compile(castor_model *m, const castor_compile_options *opts,
                                        castor_program **out_program);
CASTOR_API void castor_program_destroy(castor_program *p);

/* What castor_model_dump_text returns: the texts castor dump prints. */
typedef enum castor_dump_kind {
  CASTOR_DUMP_IR = 0,  /* the final IR, text form (castor dump) */
  CASTOR_DUMP_CASTS,   /* the cast report: per layer its compute dtype, why, its casts
                        * and weight bytes (castor dump --casts) */
  CASTOR_DUMP_LLVM,    /* the target's optimized LLVM IR (--emit=llvm) */
  CASTOR_DUMP_PTX,     /* PTX (target CASTOR_TARGET_CUDA; needs no GPU) */
  CASTOR_DUMP_DOT,     /* the final IR as a Graphviz DOT graph (--emit=dot) */
  CASTOR_DUMP_SUMMARY  /* per layer its op, output shape, parameters, compute dtype and
                        * weight bytes as float32 and as compiled (castor summary) */
} castor_dump_kind;

/* Runs castor_compile's pipeline on m under opts (NULL: defaults) and
 * returns `kind` as text in *out_text: NUL-terminated, owned by m, valid
 * until the next castor_model_dump_text on m or castor_model_destroy(m).
 * Warnings (weights that overflow float16) go to the context's last
 * warnings. Returns castor_compile's statuses, and
 * CASTOR_ERR_INVALID_ARGUMENT for an unknown kind or a NULL out_text. */
CASTOR_API castor_status castor_model_dump_text(castor_model *m, const castor_compile_options *opts,
                                                castor_dump_kind kind, const char **out_text);

/* Describes an input or output: name, dtype and shape; dims[0] is -1 when
 * it is the batch dimension. Pointers stay valid while p lives. */
typedef struct castor_tensor_info {
  const char *name;
  castor_dtype dtype;
  int rank;
  const int64_t *dims;
} castor_tensor_info;

CASTOR_API int castor_program_num_inputs(const castor_program *p);
CASTOR_API int castor_program_num_outputs(const castor_program *p);
CASTOR_API castor_status castor_program_input_info(const castor_program *p, int i,
                                                   castor_tensor_info *out_info);
CASTOR_API castor_status castor_program_output_info(const castor_program *p, int i,
                                                    castor_tensor_info *out_info);

/* ---- tensors: dense, row-major, 64-byte aligned host memory; rank 0 to CASTOR_MAX_RANK ----
 *
 * A dimension may be 0 (an empty tensor, as in NumPy and ONNX): numel and
 * nbytes are 0 and the data pointer is still a valid, aligned one. A
 * negative dimension is CASTOR_ERR_INVALID_ARGUMENT. */

CASTOR_API castor_status castor_tensor_create(castor_context *ctx, castor_dtype dtype, int rank,
                                              const int64_t *dims, castor_tensor **out_tensor);
/* A tensor over the caller's memory, without a copy (the Python module
 * passes a NumPy array's buffer this way): data holds the tensor row-major,
 * is 64-byte aligned (else CASTOR_ERR_INVALID_ARGUMENT: copy into a
 * castor_tensor_create tensor instead) and must stay valid while the
 * tensor lives; castor_tensor_destroy frees the tensor, never data. A run
 * reads an input tensor's data and writes an output tensor's in place.
 * Statuses as castor_tensor_create's, and CASTOR_ERR_INVALID_ARGUMENT for
 * a NULL data. */
CASTOR_API castor_status castor_tensor_wrap(castor_context *ctx, castor_dtype dtype, int rank, const int64_t *dims,
                                            void *data, castor_tensor **out_tensor);
CASTOR_API void castor_tensor_destroy(castor_tensor *t);
CASTOR_API void *castor_tensor_data(castor_tensor *t);
CASTOR_API castor_dtype castor_tensor_dtype(const castor_tensor *t);
CASTOR_API int castor_tensor_rank(const castor_tensor *t);
CASTOR_API const int64_t *castor_tensor_dims(const castor_tensor *t);
CASTOR_API int64_t castor_tensor_numel(const castor_tensor *t);
CASTOR_API size_t castor_tensor_nbytes(const castor_tensor *t);

/* Reads a NumPy .npy file (f32, f16, i32, i64, bool; float64 is converted
 * to float32) into a new tensor. CASTOR_ERR_IO if unreadable,
 * CASTOR_ERR_PARSE if malformed. */
CASTOR_API castor_status castor_tensor_load_npy(castor_context *ctx, const char *path,
                                                castor_tensor **out_tensor);
/* Writes t as a .npy file (bf16 has no NumPy dtype: CASTOR_ERR_UNSUPPORTED). */
CASTOR_API castor_status castor_tensor_save_npy(castor_tensor *t, const char *path);

/* Runs the program. inputs[i] must match input i's dtype and shape with one
 * batch size for all. The batch may be 0 (inputs [0, ...]): the run then
 * computes no row and returns outputs with 0 rows (outputs without the
 * batch dimension are computed as usual); a training step's batch must hold
 * at least one sample. For each output, outputs[i] may be a tensor of the
 * right dtype and shape (written in place) or NULL, in which case the run
 * creates it and stores it there (the caller destroys it). Returns
 * CASTOR_ERR_INVALID_ARGUMENT, with a message naming the tensor and both
 * shapes, on a mismatch. */
CASTOR_API castor_status castor_program_run(castor_program *p, castor_tensor *const *inputs,
                                            int n_inputs, castor_tensor **outputs,
                                            int n_outputs);

/* ---- numerics check (castor check): the policy build against float32 ----
 *
 * castor_check compiles the model twice on the same target, once as the
 * options ask (the build under test: its policy, --fp32-layers, ...) and
 * once under float32 with no autocast options (the reference), runs both
 * on the same inputs with every intermediate value kept, and compares them
 * value by value (values are matched by name; a cast is compared with its
 * operand's float32 value, a folded weight with the float32 weight). When
 * the outputs are off by more than the tolerance it searches, by
 * bisection over the layers that compute in 16 bits, the smallest set of
 * layers to keep in float32 that brings them back within it, and verifies
 * that set with a final run.
 *
 * Errors are normalized: max |got - want| / max |want| over a tensor (the
 * end-to-end tests' measure). An element is "off" when |got - want| exceeds
 * tolerance * max |want|, or when exactly one side is NaN/Inf. */

typedef struct castor_check_options {
  castor_compile_options compile; /* the build under test; its policy, target... */
  double tolerance;   /* normalized error allowed on the outputs; 0 (default): 8 ulps of the
                       * policy's compute dtype (f32 4.8e-7, f16 3.9e-3, bf16 3.1e-2) */
  int64_t batch;      /* batch of the random inputs when the caller gives none (1) */
  uint64_t seed;      /* their seed (1): uniform in [-1, 1), as castor run draws them */
  const char *layers; /* comma-separated layer names to report (NULL: every layer) */
  int search;         /* search the smallest --fp32-layers fix when outputs are off (1) */
} castor_check_options;

CASTOR_API void castor_check_options_init(castor_check_options *o);

typedef enum castor_check_verdict {
  CASTOR_CHECK_OK = 0,              /* outputs within the tolerance, finite where float32 is */
  CASTOR_CHECK_FIX,                 /* off; fp32_layers brings them back (verified by a run) */
  CASTOR_CHECK_NO_FIX,              /* off, and no set of layers in float32 helps */
  CASTOR_CHECK_REFERENCE_NOT_FINITE, /* the float32 build itself has NaN/Inf in its outputs:
                                     * not a precision problem (look at the inputs) */
  CASTOR_CHECK_OFF                  /* off; no search asked (search = 0) */
} castor_check_verdict;

/* The first NaN or Inf of a build in schedule order (inputs and weights
 * included). found is 0 when there is none. */
typedef struct castor_check_nonfinite {
  int found;
  const char *layer; /* the layer of the value (a cast's: the layer it serves) */
  const char *op;    /* "matmul", "cast", "input", "const" ... */
  const char *value; /* the IR value's name */
  int64_t index;     /* flat row-major index of the element */
  int rank;
  int64_t coords[CASTOR_MAX_RANK]; /* its coordinates (batch first), rank of them */
  double x;          /* NaN, Inf or -Inf */
} castor_check_nonfinite;

/* One layer of the report, in graph order. */
typedef struct castor_check_layer {
  const char *layer;
  const char *value;   /* the value compared: the layer's result */
  const char *op;      /* its op */
  castor_dtype dtype;  /* the layer's compute dtype in the build under test */
  int64_t numel;       /* elements of that value */
  int compared;        /* 0: no float32 counterpart, the error fields are 0 */
  double max_abs_error, rel_error, share_off; /* share_off in [0, 1] */
  /* Ranges of the float32 build's values against the limits of limit_dtype
   * (bf16 for layers that compute in bf16, else f16): largest |x|, and how
   * many values exceed its largest finite value (65504 for f16), fall below
   * its smallest normal (6.1e-5: subnormal) or round to zero (<= 3.0e-8
   * for f16). act_ counts the layer's activations, weight_ its weights. */
  castor_dtype limit_dtype;
  int64_t act_numel, act_overflow, act_subnormal, act_zero;
  double act_max_abs;
  int64_t weight_numel, weight_overflow, weight_subnormal, weight_zero;
  double weight_max_abs;
  int64_t not_finite; /* NaN/Inf among the layer's values in the build under test */
} castor_check_layer;

typedef struct castor_check_summary {
  const char *model, *policy;
  double tolerance;
  int64_t batch;
  castor_check_verdict verdict;
  double output_error;     /* worst normalized error of an output, build under test */
  const char *fp32_layers; /* FIX: the set (comma-separated, graph order); else NULL */
  double fixed_output_error; /* FIX: worst output error with that set */
  int n_trials;            /* builds the search compiled and ran */
  castor_check_nonfinite first_bad;           /* in the build under test */
  castor_check_nonfinite reference_first_bad; /* in the float32 build */
  const char *warnings; /* the build under test's compile warnings (weights that overflow
                         * or flush to zero in 16 bits), "" if none */
  /* castor_check_train only (train is 0 for castor_check): verdict is OK when
   * no gradient flushes to zero or overflows float16 at loss_scale, OFF when
   * some do; train_verdict says why in one line. */
  int train;
  double loss_scale;      /* the scale the "scaled" counts use */
  double loss;            /* the batch's mean loss (float32 build) */
  int scaling_needed;     /* some non-zero gradient flushes to zero unscaled */
  double fixed_scale_min, fixed_scale_max; /* the powers of two that, as a fixed scale, flush no
                           * gradient and overflow none on this batch; min > max: none does */
  const char *train_verdict;
} castor_check_summary;

typedef struct castor_check_report castor_check_report;

/* Checks m. inputs may be NULL (n_inputs 0): seeded random float32 inputs
 * of opts->batch rows. Returns CASTOR_ERR_INVALID_ARGUMENT for bad options
 * (an unknown layer in opts->layers or fp32_layers, a negative tolerance)
 * or inputs of the wrong shape or dtype, with the message in the context;
 * compile and run failures as castor_compile and castor_program_run return
 * them. A verdict other than OK is a result, not an error. The report
 * is the caller's (castor_check_report_destroy). */
CASTOR_API castor_status castor_check(castor_model *m, const castor_check_options *opts,
                                      castor_tensor *const *inputs, int n_inputs,
                                      castor_check_report **out_report);
CASTOR_API void castor_check_report_destroy(castor_check_report *r);
/* Strings in what these return stay valid while r lives. */
CASTOR_API void castor_check_report_summary(const castor_check_report *r, castor_check_summary *out);
CASTOR_API int castor_check_report_num_layers(const castor_check_report *r);
CASTOR_API castor_status castor_check_report_layer(const castor_check_report *r, int i,
                                                   castor_check_layer *out);

typedef enum castor_check_format {
  CASTOR_CHECK_TEXT = 0, /* the table castor check prints */
  CASTOR_CHECK_JSON,     /* the same as one JSON object (castor check --json) */
  CASTOR_CHECK_DOT       /* Graphviz DOT of the build under test, each value with its error */
} castor_check_format;

/* The report as text; owned by r, valid until the next call on r. */
CASTOR_API const char *castor_check_report_format(castor_check_report *r, castor_check_format f);

/* ---- gradients in float16 (castor check --train) ----
 *
 * castor_check_train compiles the model's gradients (the training step's
 * forward pass, loss and backward pass, no update) under float32 with no
 * loss scale, runs them on one batch (x: the model's input; y: the targets,
 * as castor_compile_train takes them) and counts, per layer (weights
 * <layer>.kernel, <layer>.bias ... grouped), the gradient elements that
 * float16 cannot hold: non-zero |g| that rounds to zero (<= 2^-25), that
 * turns subnormal (< 2^-14 = 6.1e-5), unscaled and multiplied by the loss
 * scale, and |g * scale| > 65504 (overflow). The scale: topts->loss_scale
 * as a number; "dynamic" or NULL: the dynamic scale's start, 2^15; "none": 1.
 * Only opts->compile (target, threads) is read of opts. Errors:
 * CASTOR_ERR_INVALID_ARGUMENT for x or y of the wrong dtype or shape, or a
 * class index outside [0, classes), with the message in the context. The
 * report's layers are castor_check_report_grad_layer's; its format is the
 * gradient table (text, JSON; DOT is empty). */
typedef struct castor_check_grad_layer {
  const char *layer;
  int64_t numel;          /* gradient elements of the layer's weights */
  double max_abs;         /* largest |g|, unscaled */
  double min_abs;         /* smallest non-zero |g|, unscaled (0: every g is 0) */
  int64_t zero, subnormal; /* unscaled: non-zero g that float16 rounds to 0; that it holds subnormal */
  int64_t scaled_zero, scaled_subnormal, scaled_overflow; /* the same of g * loss_scale; > 65504 */
} castor_check_grad_layer;

struct castor_train_options;
CASTOR_API castor_status castor_check_train(castor_model *m, const castor_check_options *opts,
                                            const struct castor_train_options *topts, castor_tensor *x,
                                            castor_tensor *y, castor_check_report **out_report);
CASTOR_API int castor_check_report_num_grad_layers(const castor_check_report *r);
CASTOR_API castor_status castor_check_report_grad_layer(const castor_check_report *r, int i,
                                                        castor_check_grad_layer *out);
/* ---- training (docs/training.md) ---- */

/* What a training step computes, with Keras 3's semantics and defaults. */
typedef struct castor_train_options {
  const char *loss;       /* NULL: "sparse_categorical_crossentropy"; "categorical_crossentropy",
                           * "mean_squared_error" */
  int from_logits;        /* the cross-entropy takes logits, not a softmax's probabilities (0) */
  const char *optimizer;  /* NULL: "rmsprop"; "adam", "sgd" */
  double learning_rate;   /* 0: the optimizer's default (sgd 0.01, else 0.001) */
  double momentum;        /* sgd and rmsprop (0: none) */
  int nesterov;           /* sgd: Nesterov momentum (0) */
  int centered;           /* rmsprop: centered (0) */
  const char *loss_scale; /* NULL: "dynamic" under mixed_float16, else "none"; or a number */
  double loss_scale_min;  /* the dynamic scale's floor (0: none) */
  /* Keras's other optimizer arguments, under Keras's names. 0 (or NULL)
   * keeps Keras's default; a value outside the range given makes
   * castor_compile_train fail with CASTOR_ERR_INVALID_ARGUMENT and a message
   * naming the field and its range. optimizer may also be "adamw". */
  double beta_1;          /* adam, adamw: in (0, 1) (0: 0.9) */
  double beta_2;          /* adam, adamw: in (0, 1) (0: 0.999) */
  double epsilon;         /* rmsprop, adam, adamw: in (0, 1] (0: 1e-7) */
  double weight_decay;    /* adamw: decoupled, w -= w * weight_decay * lr before each
                           * update; >= 0 (0: Keras's 0.004) */
  double loss_scale_initial;       /* the dynamic scale's start (Keras LossScaleOptimizer
                                    * initial_scale), in [2^-24, 2^64] (0: 2^15) */
  int64_t loss_scale_growth_steps; /* finite steps after which it doubles (Keras
                                    * dynamic_growth_steps), in [1, 10^9] (0: 2000) */
  /* Gradient clipping, Keras's, on the unscaled gradients (after a
   * dynamic scale's finiteness check, before weight decay and the update);
   * at most one, each in (0, 1e30] (0: none). clipnorm: each weight's
   * gradient g becomes g * clipnorm / max(|g|, clipnorm); global_clipnorm:
   * every gradient is scaled so that their global norm is at most it;
   * clipvalue: each element is clipped to [-clipvalue, clipvalue]. */
  double clipnorm, clipvalue, global_clipnorm;
  /* A learning-rate schedule (keras.optimizers.schedules), evaluated by
   * castor_program_run before each step at "optimizer.iterations" (the
   * applied steps so far, as Keras evaluates it at optimizer.iterations),
   * which sets "optimizer.learning_rate". NULL: the constant learning_rate.
   *   "exponential_decay": lr * decay_rate^(t / decay_steps), the exponent
   *       floored with staircase (ExponentialDecay);
   *   "cosine_decay": CosineDecay(learning_rate, decay_steps, alpha,
   *       warmup_target, warmup_steps): with warmup_target > 0, linear from
   *       learning_rate to warmup_target over warmup_steps, then the cosine
   *       from warmup_target down to alpha * warmup_target over decay_steps;
   *   "piecewise_constant_decay": values[0] while t <= boundaries[0],
   *       values[i] while boundaries[i-1] < t <= boundaries[i], values[n]
   *       after (PiecewiseConstantDecay; learning_rate must stay 0).
   * docs/training.md has the formulas. */
  const char *lr_schedule;
  int64_t decay_steps;       /* exponential_decay, cosine_decay: > 0 */
  double decay_rate;         /* exponential_decay: > 0 */
  int staircase;             /* exponential_decay (0) */
  double alpha;              /* cosine_decay: in [0, 1] (0) */
  double warmup_target;      /* cosine_decay: > 0 turns the warmup on (0: none) */
  int64_t warmup_steps;      /* cosine_decay with warmup_target: >= 0 (0) */
  const int64_t *boundaries; /* piecewise_constant_decay: strictly increasing, >= 0 */
  int n_boundaries;          /* at least 1 */
  const double *values;      /* piecewise_constant_decay: the rates, n_boundaries + 1, > 0 */
  int n_values;
} castor_train_options;

CASTOR_API void castor_train_options_init(castor_train_options *o);
/* The model's training defaults (a .cast model's `compile` statement) as
 * training options (what it does not give stays NULL or 0);
 * castor_compile_train uses them for whatever its own options leave NULL.
 * Strings live as long as m. */
CASTOR_API void castor_model_train_options(const castor_model *m, castor_train_options *out);

/* Compiles the model's training step: one run of the program is one step
 * (forward, loss, gradients, optimizer update). Its inputs are the model's,
 * then the targets (int32 class indices [N] for sparse categorical
 * cross-entropy, else float32 of the prediction's shape); its outputs the
 * model's, then "loss" (float32, a scalar: the batch's mean loss before the
 * update). The weights, optimizer slots and the training scalars live in
 * the program as state, kept between runs: the model's weights as loaded
 * (or initialized), slots at zero; a model loaded from a .keras file
 * that holds its optimizer's variables resumes from them (iterations,
 * slots, loss scale; docs/keras.md "Resuming training") when it trains
 * with the optimizer its compile_config names, and a count or shape that
 * does not fit is CASTOR_ERR_PARSE. A Keras model with a Dropout of rate > 0
 * is CASTOR_ERR_UNSUPPORTED here (castor lowers Dropout for inference
 * only), naming the layer; castor_compile and castor_compile_eval take it. */
CASTOR_API castor_status castor_compile_train(castor_model *m, const castor_compile_options *opts,
                                              const castor_train_options *topts, castor_program **out_program);

/* The model's loss without gradients, for evaluation: inputs and outputs
 * as castor_compile_train's, the weights state (set them from a training
 * program with castor_program_copy_weights); no update. */
CASTOR_API castor_status castor_compile_eval(castor_model *m, const castor_compile_options *opts,
                                             const castor_train_options *topts, castor_program **out_program);

/* The state of a training program (0 for others): weights by their keys
 * ("dense_1.kernel"), optimizer slots ("dense_1.kernel.velocity"), and the
 * scalars "optimizer.learning_rate", "optimizer.iterations" (int64: applied
 * steps), "optimizer.loss_scale" and "optimizer.good_steps" (a dynamic
 * scale only). The program keeps its state where it runs (host memory on
 * the cpu target); get and set copy it. */
CASTOR_API int castor_program_num_states(const castor_program *p);
CASTOR_API castor_status castor_program_state_info(const castor_program *p, int i, castor_tensor_info *out_info);

/* What state i of a training program is: a model weight (trainable, or a
 * non-trainable variable such as batch norm's moving statistics: the
 * states castor_program_save_weights writes and castor_program_copy_weights
 * copies), an optimizer slot, or a training scalar. Decided by the
 * compiler, never by the state's name. */
typedef enum castor_state_kind {
  CASTOR_STATE_INVALID = -1,     /* p is NULL or i is not a state index */
  CASTOR_STATE_TRAINABLE = 0,    /* a trainable model weight ("dense_1.kernel") */
  CASTOR_STATE_NONTRAINABLE = 1, /* a model variable no gradient updates */
  CASTOR_STATE_SLOT = 2,         /* an optimizer slot ("dense_1.kernel.velocity") */
  CASTOR_STATE_SCALAR = 3,       /* a training scalar ("optimizer.iterations") */
} castor_state_kind;
CASTOR_API castor_state_kind castor_program_state_kind(const castor_program *p, int i);
/* Copies state `name` into a new tensor (*out), or writes it from t (its
 * dtype and shape must match: CASTOR_ERR_INVALID_ARGUMENT otherwise). */
CASTOR_API castor_status castor_program_get_state(castor_program *p, const char *name, castor_tensor **out_tensor);
CASTOR_API castor_status castor_program_set_state(castor_program *p, const char *name, const castor_tensor *t);
/* Copies every model weight (the states of kind CASTOR_STATE_TRAINABLE or
 * CASTOR_STATE_NONTRAINABLE) of src into dst's state of the same name,
 * which must exist with the same dtype and shape. */
CASTOR_API castor_status castor_program_copy_weights(castor_program *dst, const castor_program *src);
/* Writes the model weights, in their variable dtype, to a safetensors file
 * with the keys a model's `weights` line loads (<layer>.kernel, ...);
 * the file is replaced atomically. A training step writes every weight the
 * model declares: those of layers whose output reaches no output (not
 * trained) keep the values the model was compiled with, so the file loads
 * back into the same model. */
CASTOR_API castor_status castor_program_save_weights(castor_program *p, const char *path);
/* Writes a training program's model as a Keras 3 .keras file that
 * replaces path atomically (docs/keras.md, "Writing .keras files"): m must
 * be the model p was compiled from, loaded from a .keras file, whose
 * config.json is written back unchanged; the trained weights go where the
 * loaded file had them, in their dataset's dtype, and the optimizer's
 * variables where Keras 3 keeps them (to: the options p was compiled with,
 * NULL for none). A model of another format is CASTOR_ERR_UNSUPPORTED. */
CASTOR_API castor_status castor_program_save_keras(castor_program *p, const castor_model *m,
                                                   const castor_train_options *to, const char *path);

/* Where a rejected step overflowed: the layers whose gradients are not
 * finite, in the order the backward pass computes them (the last layer
 * first). */
typedef struct castor_overflow_report {
  char layer[256];   /* the first such layer; "" if every gradient is finite */
  int64_t nonfinite; /* its non-finite gradient elements (all its weights) */
  int64_t numel;     /* its gradient elements */
  int layers;        /* how many layers have a non-finite gradient */
  int loss_finite;   /* 0: the loss itself is not finite (the forward pass overflows) */
} castor_overflow_report;

/* Recomputes the gradients of a training step on batch (x, y) at the fixed
 * loss scale `loss_scale` (the scale the step used), with step's current
 * weights, under opts's policy and topts's loss, and reports which layer's
 * gradients overflowed first. A rejected step leaves the weights as they
 * were, so after a step whose scale fell this finds why. Compiles a
 * program of its own: call it on a rare event, not every step. */
CASTOR_API castor_status castor_program_find_overflow(castor_program *step, castor_model *m,
                                                      const castor_compile_options *opts,
                                                      const castor_train_options *topts, double loss_scale,
                                                      castor_tensor *x, castor_tensor *y,
                                                      castor_overflow_report *out);

#ifdef __cplusplus
}
#endif

#endif
