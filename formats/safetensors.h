/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors.h: the safetensors weight format, read and written (one
 * format, one room). Depends on util/ only; tensors are described in the
 * format's terms (dtype_id from util/dtype.h), and callers (the frontend's
 * weights binding, the API's `train --save`) convert to their own.
 *
 * Layout: an 8-byte little-endian header length H, H bytes of JSON, then
 * the data section. The JSON is an object mapping tensor names to
 * {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets
 * relative to the data section), plus an optional "__metadata__" object of
 * string to string.
 *
 * Read (safetensors_read.c): strict; the header goes through formats/json.h
 * and every entry is validated (a float dtype castor reads: F32, F16, BF16;
 * rank <= SAFETENSORS_MAX_RANK; size = numel * dtype size without overflow;
 * offsets inside the data section; no two tensors overlapping).
 *
 * Write (safetensors_write.c): the file is laid out exactly as the
 * reference implementation (huggingface/safetensors, safetensors/src/tensor.rs,
 * `prepare`) lays it out, so for the same tensors it is byte-identical to
 * what safetensors.numpy.save_file writes:
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
#ifndef CASTOR_FORMATS_SAFETENSORS_H
#define CASTOR_FORMATS_SAFETENSORS_H

#include "util/diag.h"
#include "util/dtype.h"
#include "util/util.h"

/* Most dimensions a tensor may have; the same as IR_MAX_RANK and
 * RT_MAX_RANK (api/castor.c checks it). */
enum { SAFETENSORS_MAX_RANK = TENSOR_MAX_RANK };

typedef struct safetensors_tensor {
  const char *name;          /* valid UTF-8, not "__metadata__", unique */
  dtype_id dtype;            /* DT_F32, DT_F16 or DT_BF16 */
  int rank;                  /* 0 to SAFETENSORS_MAX_RANK */
  int64_t dims[SAFETENSORS_MAX_RANK]; /* each >= 0 */
  const void *data;          /* numel * dtype size bytes, row-major */
  int64_t nbytes;            /* read: numel * dtype size; ignored by the writer */
  int64_t offset;            /* read: of data in the file's data section; ignored by the writer */
} safetensors_tensor;

/* ---- read ---- */

typedef struct safetensors_file {
  char *blob; /* the data section, as far as the tensors reach */
  size_t blob_len;
  safetensors_tensor *tensors; /* in header order; data points into blob */
  int n_tensors;
  arena *arena; /* names */
} safetensors_file;

/* Reads and validates a safetensors file. Errors are reported at `at` (the
 * model line that named the file) with the file name and byte offset in
 * the message; an unreadable file is a DIAG_KIND_IO error. Reading is
 * driven by the header, never "until EOF": only regular files are read. */
bool safetensors_read(const char *path, diag_loc at, diag_sink *d, safetensors_file *out);
/* The same over a file's bytes in memory (tests, fuzzing); `name` names it
 * in messages. */
bool safetensors_read_mem(const char *name, const void *bytes, size_t len, diag_loc at,
                          diag_sink *d, safetensors_file *out);
void safetensors_fini(safetensors_file *st);
const safetensors_tensor *safetensors_find(const safetensors_file *st, const char *name);

/* ---- write ---- */

/* Writes the tensors (in any order; the file orders them as above) and
 * n_metadata string pairs (metadata[2*i] -> metadata[2*i + 1]; may be NULL
 * when n_metadata is 0) to path. Bad arguments (a dtype the format's
 * readers in castor do not take, a duplicate or invalid name, a negative
 * dimension, an overflowing size) are DIAG_KIND_INVALID_ARGUMENT errors
 * naming the tensor; I/O failures are DIAG_KIND_IO errors. Nothing is
 * written unless everything is valid. */
bool safetensors_write(const char *path, const safetensors_tensor *tensors, int n_tensors,
                       const char *const *metadata, int n_metadata, diag_sink *d);

#endif
