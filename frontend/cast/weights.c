/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weights.c: where the constants of a lowered model come from. Used by
 * lower.c once per weight (dense kernels and biases), in schedule order.
 *
 * With a weights file (formats/safetensors_read.c reads and validates it), every weight
 * the model needs must be there with exactly the model's shape; F16 and
 * BF16 data are widened to f32 (bit-exact, util/half.h). Tensors the model
 * does not use are reported as a warning once lowering is done.
 *
 * Without one, kernels get Keras' default Glorot-uniform init,
 * U(-limit, limit) with limit = sqrt(6 / (fan_in + fan_out)), from a PRNG
 * seeded with (seed ^ str_hash(key)), so each tensor is reproducible on its
 * own whatever the rest of the model is; biases are zeros. A recurrent
 * kernel is Keras's Orthogonal instead (fe_weights_orthogonal). The init stops at
 * FE_MAX_INIT_BYTES in total, so a typo like units=40960000 gives an error,
 * not an out-of-memory abort.
 *
 * All data lives in the graph's arena, 64-byte aligned.
 */
#include "frontend/cast/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void fe_weights_open(fe_weights *w, const char *path, diag_loc loc, uint64_t seed,
                     int errors0, diag_sink *d) {
  *w = (fe_weights){.d = d, .errors0 = errors0, .path = path, .loc = loc, .seed = seed};
  if (!path) return;
  w->from_file = true;
  w->file_ok = safetensors_read(path, loc, d, &w->st);
  if (w->file_ok) w->used = xcalloc((size_t)w->st.n_tensors + 1, sizeof *w->used);
}

void fe_weights_fini(fe_weights *w) {
  if (w->file_ok) safetensors_fini(&w->st);
  free(w->used);
  w->used = NULL;
  w->file_ok = false;
}

static void shape_str(str_buf *b, int rank, const int64_t *dims) {
  str_buf_putc(b, '[');
  for (int i = 0; i < rank; i++) str_buf_printf(b, "%s%lld", i ? "," : "", (long long)dims[i]);
  str_buf_putc(b, ']');
}

static float *from_file(fe_weights *w, ir_graph *g, const char *key, const ir_type *t,
                        const char *layer, diag_loc layer_loc) {
  const safetensors_tensor *ft = safetensors_find(&w->st, key);
  if (!ft) {
    diag_error(w->d, w->loc, "weights file '%s' has no tensor '%s'", w->path, key);
    diag_note(w->d, layer_loc, "layer '%s' is declared here", layer);
    return NULL;
  }
  w->used[ft - w->st.tensors] = true;
  bool same = ft->rank == t->rank;
  for (int i = 0; same && i < t->rank; i++) same = ft->dims[i] == t->dims[i];
  if (!same) {
    str_buf have, want;
    str_buf_init(&have);
    str_buf_init(&want);
    shape_str(&have, ft->rank, ft->dims);
    shape_str(&want, t->rank, t->dims);
    diag_error(w->d, w->loc, "weight '%s' has shape %s but the model needs %s", key,
               str_buf_cstr(&have), str_buf_cstr(&want));
    diag_note(w->d, layer_loc, "layer '%s' is declared here", layer);
    str_buf_fini(&have);
    str_buf_fini(&want);
    return NULL;
  }
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i]; /* validated by the reader */
  float *dst = arena_alloc_aligned(g->arena, (size_t)n * sizeof(float), 64);
  fe_nonfinite nf = fe_tensor_to_f32(ft, dst);
  if (fe_nonfinite_any(nf)) {
    str_buf b;
    str_buf_init(&b);
    fe_nonfinite_str(&b, nf);
    diag_warning(w->d, w->loc, "weight '%s' in '%s' has %s of %lld values", key, w->path,
                 str_buf_cstr(&b), (long long)n);
    str_buf_fini(&b);
  }
  return dst;
}

static float *glorot(fe_weights *w, ir_graph *g, const char *key, const ir_type *t, bool ones,
                     const char *layer, diag_loc layer_loc) {
  int64_t n = 1, bytes;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i]; /* checked by the caller */
  bytes = n * (int64_t)sizeof(float);
  if (bytes > w->max_init_bytes - w->init_bytes) {
    if (w->max_init_bytes % (1 << 30) == 0)
      diag_error(w->d, layer_loc,
                 "the weights of layer '%s' take the model past %lld GiB, more than castor "
                 "initializes without a weights file",
                 layer, (long long)(w->max_init_bytes >> 30));
    else
      diag_error(w->d, layer_loc,
                 "the weights of layer '%s' take the model past %lld bytes, more than castor "
                 "initializes without a weights file",
                 layer, (long long)w->max_init_bytes);
    return NULL;
  }
  w->init_bytes += bytes;
  float *dst = arena_alloc_aligned(g->arena, (size_t)bytes, 64); /* zeroed: biases */
  if (ones) {
    for (int64_t i = 0; i < n; i++) dst[i] = 1.0f;
  } else if (t->rank >= 2) {
    /* Keras's fans: a conv kernel [KH, KW, in, out] has the receptive field KH*KW times its channels */
    double receptive = 1;
    for (int i = 0; i < t->rank - 2; i++) receptive *= (double)t->dims[i];
    float limit = (float)sqrt(6.0 / (receptive * (double)t->dims[t->rank - 2] + receptive * (double)t->dims[t->rank - 1]));
    rng r;
    rng_init(&r, w->seed ^ str_hash(key));
    for (int64_t i = 0; i < n; i++) dst[i] = rng_uniform_f32(&r, -limit, limit);
  }
  return dst;
}

bool fe_weights_get(fe_weights *w, ir_graph *g, const char *key, const ir_type *t, bool ones,
                    const char *layer, diag_loc layer_loc, const float **out) {
  *out = NULL;
  if (w->from_file) {
    if (!w->file_ok) return false; /* reported when it was read */
    return (*out = from_file(w, g, key, t, layer, layer_loc)) != NULL;
  }
  if (diag_error_count(w->d) > w->errors0) return true; /* the graph will be discarded */
  return (*out = glorot(w, g, key, t, ones, layer, layer_loc)) != NULL;
}

void fe_weights_check_unused(fe_weights *w) {
  if (!w->file_ok || diag_error_count(w->d) > w->errors0) return;
  for (int i = 0; i < w->st.n_tensors; i++)
    if (!w->used[i])
      diag_warning(w->d, w->loc, "weights file '%s' has tensor '%s', which the model does not use",
                   w->path, w->st.tensors[i].name);
}

/* Keras's Orthogonal (gain 1): a standard-normal [max, min] matrix (Box-Muller
 * over the key's own stream), its QR's Q with the columns signed by R's
 * diagonal -- which Gram-Schmidt gives directly, R's diagonal being the
 * norms -- transposed when the tensor is wider than tall (an LSTM's
 * [units, 4 units]: orthonormal rows). Classical Gram-Schmidt twice per
 * column in double keeps Q orthonormal to rounding. */
#define FE_MAX_ORTHOGONAL_FLOPS 1e10 /* 2 passes * 2 m n^2: units=1024 of an LSTM */

void fe_weights_orthogonal(fe_weights *w, const char *key, const ir_type *t, float *data, const char *layer,
                           diag_loc layer_loc) {
  if (w->from_file || t->rank != 2) return;
  int64_t rows = t->dims[0], cols = t->dims[1];
  int64_t m = rows > cols ? rows : cols, n = rows > cols ? cols : rows;
  if (4.0 * (double)m * (double)n * (double)n > FE_MAX_ORTHOGONAL_FLOPS) {
    diag_warning(w->d, layer_loc,
                 "layer '%s': '%s' [%lld,%lld] starts Glorot-uniform, not orthogonal as in Keras: its QR "
                 "is too costly to draw without a weights file",
                 layer, key, (long long)rows, (long long)cols);
    return;
  }
  double *q = xmalloc((size_t)(m * n) * sizeof *q); /* column j at q + j*m */
  rng r;
  rng_init(&r, w->seed ^ str_hash(key) ^ 0x6f7274686fULL); /* "ortho": not the Glorot stream */
  for (int64_t i = 0; i < m * n; i++) {
    double u1 = 1.0 - rng_uniform(&r), u2 = rng_uniform(&r);
    q[i] = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
  }
  for (int64_t j = 0; j < n; j++) {
    double *v = q + j * m;
    for (int pass = 0; pass < 2; pass++)
      for (int64_t k = 0; k < j; k++) {
        const double *u = q + k * m;
        double dot = 0;
        for (int64_t i = 0; i < m; i++) dot += u[i] * v[i];
        for (int64_t i = 0; i < m; i++) v[i] -= dot * u[i];
      }
    double norm = 0;
    for (int64_t i = 0; i < m; i++) norm += v[i] * v[i];
    norm = sqrt(norm);
    for (int64_t i = 0; i < m; i++) v[i] = norm > 0 ? v[i] / norm : 0;
  }
  for (int64_t a = 0; a < rows; a++)
    for (int64_t b = 0; b < cols; b++) data[a * cols + b] = (float)(rows >= cols ? q[b * m + a] : q[a * m + b]);
  free(q);
}
