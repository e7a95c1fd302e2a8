/* SPDX-License-Identifier: Apache-2.0 */
/*
 * npy.h: reading and writing NumPy .npy files, the tensor format of the AOT
 * executable and of the numeric tests.
 *
 * Read: format versions 1.0, 2.0 and 3.0; C order, little-endian; dtypes
 * '<f4' (f32), '<f2' (f16), '<i4' (i32), '<i8' (i64), '|b1' (i1), and '<f8',
 * which has no castor dtype: it is read as float64 (is_f64) and must go through
 * npy_convert before use. Write: version 1.0, or 2.0 when the header does
 * not fit 1.0's 16-bit length; never bf16 (NumPy has no such dtype).
 *
 * Every malformed input is an error reported through the sink as
 * `path: error: ...`; nothing in here crashes, aborts or allocates more than
 * the file holds, whatever the bytes.
 */
#ifndef CASTOR_NPY_H
#define CASTOR_NPY_H

#include "util/diag.h"
#include "util/dtype.h"
#include "util/util.h"

#include <stdio.h>

/* Most dimensions an array may have; the same as RT_MAX_RANK (api/castor.c
 * checks it). */
enum { NPY_MAX_RANK = TENSOR_MAX_RANK };

typedef struct npy_array {
  dtype_id dtype;            /* element type of data (DT_F32 placeholder when is_f64) */
  bool is_f64;               /* data holds float64 ('<f8' file) until npy_convert */
  int rank;                  /* 0 (a scalar) to NPY_MAX_RANK */
  int64_t dims[NPY_MAX_RANK];
  int64_t numel;             /* product of dims (1 for a scalar) */
  void *data;                /* row-major elements, malloc'ed; NULL after _fini */
  int64_t nbytes;            /* numel * element size */
} npy_array;

/* Reads path into *out (which needs no initialization). On failure reports
 * an error, leaves *out empty (safe to _fini) and returns false. A file that
 * cannot be opened or read is a DIAG_KIND_IO error; a malformed or
 * unsupported .npy is a plain (DIAG_KIND_UNSPECIFIED) error. */
bool npy_read(const char *path, npy_array *out, diag_sink *d);
/* The same from an open stream (fmemopen in tests and fuzzing), named
 * `name` in messages; f stays open. */
bool npy_read_stream(FILE *f, const char *name, npy_array *out, diag_sink *d);

/* The header of a .npy file as it declares itself, for readers of dtypes
 * that dtype_id lacks (train/dataset.c: uint8 images, int8..uint64
 * labels). descr is the dtype string as written ("|u1", "<f4"; non-ASCII
 * bytes replaced by '?'); nothing is checked but the format itself and the
 * rank (at most NPY_MAX_RANK). */
typedef struct npy_header {
  char descr[32];
  bool fortran;
  int rank;
  int64_t dims[NPY_MAX_RANK];
} npy_header;

/* Reads the preamble and header of an open .npy file, reporting errors as
 * npy_read does; on success f is positioned at the first data byte. */
bool npy_read_header(FILE *f, const char *path, npy_header *out, diag_sink *d);

/* Converts the elements in place to the float dtype `to` (f32, f16, bf16)
 * from f64, f32, f16 or bf16, rounding to nearest even bit for bit as
 * NumPy's / ml_dtypes' astype does (overflow gives inf; f64 -> f16 rounds
 * once, f64 -> bf16 goes through f32 as ml_dtypes does). Integer arrays and
 * integer targets are an error reported at `path`. */
bool npy_convert(npy_array *a, dtype_id to, const char *path, diag_sink *d);
/* npy_convert(a, DT_F32, path, d) */
bool npy_to_f32(npy_array *a, const char *path, diag_sink *d);

/* Writes a row-major array. dims may be NULL when rank is 0. Fails (with an
 * error) on a bf16 dtype or an array too large (DIAG_KIND_UNSUPPORTED), a
 * bad rank or dimension (DIAG_KIND_INVALID_ARGUMENT), or an I/O error
 * (DIAG_KIND_IO). */
bool npy_write(const char *path, dtype_id dtype, int rank, const int64_t *dims,
                  const void *data, diag_sink *d);

/* Frees the data; the struct may be reused. */
void npy_fini(npy_array *a);

/* "(4, 784)", "(3,)" or "()", as NumPy prints shapes; returns buf. */
const char *npy_shape_str(int rank, const int64_t *dims, char *buf, size_t len);

#endif
