/*
 * safetensors_write.h: writes named tensors to a safetensors file, the
 * format `weights "..."` in a .cast model reads (frontend/safetensors.c)
 * and `castor train --save` writes.
 *
 * The file is laid out exactly as the reference implementation
 * (huggingface/safetensors, safetensors/src/tensor.rs, `prepare`) lays it
 * out, so for the same tensors it is byte-identical to what
 * safetensors.numpy.save_file writes:
 *   - tensors are ordered by descending dtype (F32, then BF16, then F16:
 *     the order of the reference's Dtype enum, reversed, so every tensor
 *     starts at a multiple of its element size), then by name, bytewise;
 *   - the header is compact JSON: "__metadata__" first when there is any,
 *     then each tensor as {"dtype":..,"shape":[..],"data_offsets":[b,e]} in
 *     that order, padded with spaces to a multiple of 8 bytes, so the data
 *     section starts 8-byte aligned;
 *   - the data section has no holes: offsets are the running sum of sizes.
 * Keys are written as given (e.g. `dense_1.kernel`), escaped as JSON.
 *
 * The file is replaced atomically (util/atomic_file.h): after an error the
 * old file, if any, is untouched.
 */
#ifndef CASTOR_SAFETENSORS_WRITE_H
#define CASTOR_SAFETENSORS_WRITE_H

#include "runtime/runtime.h"

typedef struct rt_st_tensor {
  const char *name;          /* valid UTF-8, not "__metadata__", unique */
  rt_dtype dtype;            /* DT_F32, DT_F16 or DT_BF16 */
  int rank;                  /* 0 to RT_MAX_RANK */
  int64_t dims[RT_MAX_RANK]; /* each >= 0 */
  const void *data;          /* numel * dtype size bytes, row-major */
} rt_st_tensor;

/* Writes the tensors (in any order; the file orders them as above) and
 * n_metadata string pairs (metadata[2*i] -> metadata[2*i + 1]; may be NULL
 * when n_metadata is 0) to path. Bad arguments (a dtype the format's
 * readers in castor do not take, a duplicate or invalid name, a negative
 * dimension, an overflowing size) are DIAG_KIND_INVALID_ARGUMENT errors
 * naming the tensor; I/O failures are DIAG_KIND_IO errors. Nothing is
 * written unless everything is valid. */
bool rt_safetensors_write(const char *path, const rt_st_tensor *tensors, int n_tensors,
                          const char *const *metadata, int n_metadata, diag_sink *d);

#endif
