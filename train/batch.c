/* SPDX-License-Identifier: Apache-2.0 */
/*
 * batch.c: what happens to a loaded dataset between the files and the
 * training step (see dataset.h): Keras's validation split, the seeded
 * per-epoch shuffle, and cutting into contiguous batch buffers.
 *
 * Invariants: the split never reorders samples (the validation set is the
 * tail of the data as loaded, as in Keras); the shuffle depends only on
 * (seed, epoch, n), so every host and every thread count sees the same
 * order; a batch buffer always holds batch_size rows of space, and the
 * last batch of an epoch fills only its first n - (n_batches-1)*batch_size.
 */
#include "train/dataset.h"

#include <math.h>
#include <string.h>

/* ---- validation_split ---- */

static bool copy_tail(const rt_dataset *ds, int64_t from, rt_dataset *v, diag_sink *d) {
  int64_t rows = ds->n - from;
  *v = *ds;
  v->n = rows;
  /* + 1: malloc(0) may return NULL */
  v->x = malloc((size_t)(rows * ds->n_features + 1) * sizeof(float));
  v->y = ds->y ? malloc((size_t)rows * sizeof(int32_t)) : NULL;
  v->y_dense = ds->y_dense ? malloc((size_t)(rows * ds->y_width + 1) * sizeof(float)) : NULL;
  if (!v->x || (ds->y && !v->y) || (ds->y_dense && !v->y_dense)) {
    rt_dataset_fini(v);
    diag_error(d, (diag_loc){0}, "out of memory for a validation set of %lld samples",
               (long long)rows);
    return false;
  }
  memcpy(v->x, ds->x + from * ds->n_features, (size_t)(rows * ds->n_features) * sizeof(float));
  if (ds->y) memcpy(v->y, ds->y + from, (size_t)rows * sizeof(int32_t));
  if (ds->y_dense)
    memcpy(v->y_dense, ds->y_dense + from * ds->y_width,
           (size_t)(rows * ds->y_width) * sizeof(float));
  v->x_dims[0] = rows;
  return true;
}

bool rt_dataset_split(rt_dataset *ds, double fraction, rt_dataset *out_val, diag_sink *d) {
  *out_val = (rt_dataset){0};
  if (!(fraction >= 0 && fraction < 1)) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                    "validation_split must be in [0, 1), got %g", fraction);
    return false;
  }
  if (fraction == 0) return true;
  int64_t split_at = (int64_t)floor((double)ds->n * (1.0 - fraction));
  if (split_at <= 0 || split_at >= ds->n) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                    "the dataset has %lld sample%s, too few to split into training and "
                    "validation sets with validation_split=%g", (long long)ds->n,
                    ds->n == 1 ? "" : "s", fraction);
    return false;
  }
  if (!copy_tail(ds, split_at, out_val, d)) return false;
  ds->n = split_at;
  ds->x_dims[0] = split_at;
  return true;
}

/* ---- shuffling: splitmix64 + Fisher-Yates ---- */

#define GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t splitmix64_next(uint64_t *state) { return mix64(*state += GOLDEN); }

/* Uniform in [0, m) for m >= 1, without modulo bias. */
static uint64_t bounded(uint64_t *state, uint64_t m) {
  uint64_t threshold = (0 - m) % m; /* 2^64 mod m */
  for (;;) {
    uint64_t r = splitmix64_next(state);
    if (r >= threshold) return r % m;
  }
}

void rt_shuffle_order(uint64_t seed, int64_t epoch, int64_t n, int64_t *order) {
  uint64_t state = seed ^ mix64(((uint64_t)epoch + 1) * GOLDEN);
  for (int64_t i = 0; i < n; i++) order[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)bounded(&state, (uint64_t)i + 1);
    int64_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

/* ---- batches ---- */

static void *alloc64(int64_t bytes) {
  size_t n = (size_t)((bytes + 63) / 64 * 64);
  return aligned_alloc(64, n ? n : 64);
}

bool rt_batcher_init(rt_batcher *b, const rt_dataset *ds, int64_t batch_size, bool shuffle,
                     uint64_t seed, diag_sink *d) {
  *b = (rt_batcher){0};
  if (batch_size < 1) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                    "the batch size must be at least 1, got %lld", (long long)batch_size);
    return false;
  }
  if (ds->n < 1 || ds->n > RT_DATASET_MAX_SAMPLES || ds->n_features < 1 ||
      (ds->y_dense && ds->y_width < 1)) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                    "cannot batch a dataset of %lld samples with %lld features and %lld label "
                    "values each: it needs 1 to %lld samples, each with at least one feature and "
                    "one label value", (long long)ds->n, (long long)ds->n_features,
                    (long long)(ds->y_dense ? ds->y_width : 1), (long long)RT_DATASET_MAX_SAMPLES);
    return false;
  }
  /* a batch never holds more rows than the dataset */
  int64_t rows = batch_size < ds->n ? batch_size : ds->n > 0 ? ds->n : 1;
  int64_t xb, yb;
  if (!size_mul_ok(rows, ds->n_features * (int64_t)sizeof(float), &xb) ||
      !size_mul_ok(rows, (ds->y_dense ? ds->y_width : 1) * (int64_t)sizeof(float), &yb)) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                    "a batch of %lld samples is too large", (long long)batch_size);
    return false;
  }
  b->ds = ds;
  b->batch_size = batch_size;
  b->n_batches = (ds->n + batch_size - 1) / batch_size;
  b->shuffle = shuffle;
  b->seed = seed;
  b->order = malloc((size_t)(ds->n ? ds->n : 1) * sizeof *b->order);
  b->x = alloc64(xb);
  if (ds->y_dense) b->y_dense = alloc64(yb);
  else b->y = alloc64(yb);
  if (!b->order || !b->x || (!b->y && !b->y_dense)) {
    rt_batcher_fini(b);
    diag_error(d, (diag_loc){0}, "out of memory for batches of %lld samples",
               (long long)batch_size);
    return false;
  }
  rt_batcher_start_epoch(b, 0);
  return true;
}

void rt_batcher_start_epoch(rt_batcher *b, int64_t epoch) {
  if (b->shuffle) rt_shuffle_order(b->seed, epoch, b->ds->n, b->order);
  else
    for (int64_t i = 0; i < b->ds->n; i++) b->order[i] = i;
}

int64_t rt_batcher_fill(rt_batcher *b, int64_t index) {
  CASTOR_ASSERT(index >= 0 && index < b->n_batches);
  const rt_dataset *ds = b->ds;
  int64_t first = index * b->batch_size;
  int64_t rows = ds->n - first < b->batch_size ? ds->n - first : b->batch_size;
  size_t xrow = (size_t)ds->n_features * sizeof(float);
  for (int64_t r = 0; r < rows; r++) {
    int64_t s = b->order[first + r];
    memcpy(b->x + r * ds->n_features, ds->x + s * ds->n_features, xrow);
    if (b->y) b->y[r] = ds->y[s];
    else
      memcpy(b->y_dense + r * ds->y_width, ds->y_dense + s * ds->y_width,
             (size_t)ds->y_width * sizeof(float));
  }
  return rows;
}

void rt_batcher_fini(rt_batcher *b) {
  if (!b) return;
  free(b->order);
  free(b->x);
  free(b->y);
  free(b->y_dense);
  *b = (rt_batcher){0};
}
