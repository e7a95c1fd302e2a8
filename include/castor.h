/*
 * castor.h: the public C API of castor, a graph compiler for small neural
 * network models. This is the only installed header.
 *
 *   castor_context *ctx;  castor_model *m;  castor_program *p;
 *   castor_context_create(&ctx);
 *   castor_model_load_file(ctx, "mnist_mlp.cast", &m);
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
#define CASTOR_VERSION_STRING "0.1.0"

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
} castor_load_options;

CASTOR_API void castor_load_options_init(castor_load_options *o);

/* Loads a .cast model. opts may be NULL (defaults). Returns CASTOR_ERR_IO
 * if the file cannot be read, CASTOR_ERR_PARSE for malformed text or weights. */
CASTOR_API castor_status castor_model_load_file(castor_context *ctx, const char *path,
                                                const castor_load_options *opts,
                                                castor_model **out_model);
/* Same from memory; `name` is used in diagnostics and anchors relative
 * weight paths. The text is copied. */
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
} castor_compile_options;

CASTOR_API void castor_compile_options_init(castor_compile_options *o);

/* Compiles a model. The program does not refer to the model afterwards. */
CASTOR_API castor_status castor_compile(castor_model *m, const castor_compile_options *opts,
                                        castor_program **out_program);
CASTOR_API void castor_program_destroy(castor_program *p);

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

/* ---- tensors: dense, row-major, 64-byte aligned host memory ---- */

CASTOR_API castor_status castor_tensor_create(castor_context *ctx, castor_dtype dtype, int rank,
                                              const int64_t *dims, castor_tensor **out_tensor);
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
 * batch size for all. For each output, outputs[i] may be a tensor of the
 * right dtype and shape (written in place) or NULL, in which case the run
 * creates it and stores it there (the caller destroys it). Returns
 * CASTOR_ERR_INVALID_ARGUMENT, with a message naming the tensor and both
 * shapes, on a mismatch. */
CASTOR_API castor_status castor_program_run(castor_program *p, castor_tensor *const *inputs,
                                            int n_inputs, castor_tensor **outputs,
                                            int n_outputs);

#ifdef __cplusplus
}
#endif

#endif
