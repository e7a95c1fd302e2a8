/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_dataset.c: the training-data reader (train/dataset.c) on arbitrary
 * bytes, plain and gzip-wrapped, then a batch of what it loaded.
 *
 * Input: a 6-byte prefix, then X's bytes, then Y's.
 *   [0] flags: bit 0 gzip-wraps X, bit 1 gzip-wraps Y (deflate here, so the
 *       fuzzer reaches the formats behind the gzip layer; unwrapped bytes
 *       that start with 1f 8b fuzz the gzip reader itself), bits 2-3 the
 *       labels kind (AUTO, SPARSE, DENSE), bit 4 a model input of shape
 *       [a, b, 1] from byte 5's nibbles instead of a feature count
 *   [1] the model's feature count (0: any)   [2] its classes (0: any)
 *   [3..4] X's length, little-endian (clamped to what is there)
 * Invariants: success xor an error; on success 1 <= n <= 2^32 - 1, at least
 * one feature, every feature finite, the sample shape's product is the
 * feature count and matches the model, labels in range or finite; the
 * batcher takes the dataset and fills its first batch.
 */
#include <string.h>
#include <zlib.h>

#include "tests/fuzz/fuzz.h"

#include "train/dataset.h"

static unsigned char *gzip_wrap(const uint8_t *p, size_t n, size_t *out_n) {
  z_stream z = {0};
  /* a small window and little memory: fast under ASan, still any gzip */
  if (deflateInit2(&z, 1, Z_DEFLATED, 16 + 9, 1, Z_DEFAULT_STRATEGY) != Z_OK) return NULL;
  size_t cap = deflateBound(&z, (uLong)n) + 32;
  unsigned char *out = malloc(cap);
  z.next_in = (unsigned char *)p;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  if (!out || deflate(&z, Z_FINISH) != Z_STREAM_END) {
    free(out);
    deflateEnd(&z);
    return NULL;
  }
  *out_n = z.total_out;
  deflateEnd(&z);
  return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 6) return 0;
  unsigned flags = data[0];
  rt_dataset_options o;
  rt_dataset_options_init(&o);
  o.n_features = data[1];
  o.n_classes = data[2];
  o.labels = (rt_labels_kind)((flags >> 2) & 3) == 3 ? RT_LABELS_AUTO : (rt_labels_kind)((flags >> 2) & 3);
  if (flags & 16) {
    o.sample_rank = 3;
    o.sample_dims[0] = 1 + (data[5] >> 4), o.sample_dims[1] = 1 + (data[5] & 15), o.sample_dims[2] = 1;
  }
  size_t xn = (size_t)data[3] | (size_t)data[4] << 8;
  const uint8_t *rest = data + 6;
  size_t n = size - 6;
  if (xn > n) xn = n;
  const uint8_t *x = rest, *y = rest + xn;
  size_t yn = n - xn;
  unsigned char *xz = NULL, *yz = NULL;
  if ((flags & 1) && (xz = gzip_wrap(x, xn, &xn))) x = xz;
  if ((flags & 2) && (yz = gzip_wrap(y, yn, &yn))) y = yz;

  diag_sink *d = diag_sink_create();
  rt_dataset ds;
  bool ok = rt_dataset_load_mem(x, xn, "x", y, yn, "y", &o, &ds, d);
  if (ok != (diag_error_count(d) == 0)) fuzz_fail("result and errors disagree", diag_text(d));
  if (ok) {
    if (ds.n < 1 || ds.n > RT_DATASET_MAX_SAMPLES || ds.n_features < 1) fuzz_fail("bad sizes", diag_text(d));
    int64_t prod = 1;
    for (int k = 0; k < ds.x_sample_rank; k++) prod *= ds.x_sample_dims[k];
    if (prod != ds.n_features) fuzz_fail("sample shape and feature count disagree", diag_text(d));
    if (o.sample_rank >= 2 && (ds.x_sample_rank != 3 || ds.x_sample_dims[0] != o.sample_dims[0] ||
                               ds.x_sample_dims[1] != o.sample_dims[1] || ds.x_sample_dims[2] != 1))
      fuzz_fail("sample shape is not the model's", diag_text(d));
    if (o.sample_rank < 2 && o.n_features > 0 && ds.n_features != o.n_features)
      fuzz_fail("feature count is not the model's", diag_text(d));
    for (int64_t i = 0; i < ds.n * ds.n_features; i++)
      if (!(ds.x[i] - ds.x[i] == 0)) fuzz_fail("a feature is not finite", diag_text(d));
    if (ds.labels == RT_LABELS_SPARSE) {
      for (int64_t i = 0; i < ds.n; i++)
        if (ds.y[i] < 0 || (o.n_classes && ds.y[i] >= o.n_classes)) fuzz_fail("label out of range", diag_text(d));
    } else {
      if (ds.y_width < 1 || (o.n_classes && ds.y_width != o.n_classes)) fuzz_fail("bad label width", diag_text(d));
      for (int64_t i = 0; i < ds.n * ds.y_width; i++)
        if (!(ds.y_dense[i] - ds.y_dense[i] == 0)) fuzz_fail("a label is not finite", diag_text(d));
    }
    rt_batcher b;
    if (!rt_batcher_init(&b, &ds, 3, true, 1, d)) fuzz_fail("the batcher refused a loaded dataset", diag_text(d));
    if (rt_batcher_fill(&b, 0) != (ds.n < 3 ? ds.n : 3)) fuzz_fail("first batch size", "");
    rt_batcher_fini(&b);
  }
  rt_dataset_fini(&ds);
  diag_sink_destroy(d);
  free(xz);
  free(yz);
  return 0;
}
