/* SPDX-License-Identifier: Apache-2.0 */
/*
 * png.h: PNG images decoded through Debian's libpng, for castor run
 * --input (train/dataset.h's rt_tensor_file_load detects them by their
 * signature). Used by train/dataset.c only.
 */
#ifndef CASTOR_TRAIN_PNG_H
#define CASTOR_TRAIN_PNG_H

#include <stdbool.h>
#include <stdint.h>

#include "util/diag.h"

/* Reads up to n bytes into buf; returns how many (fewer: the end, or an
 * error the reader reported already). */
typedef int64_t (*rt_png_read_fn)(void *ctx, void *buf, int64_t n);

typedef struct rt_png {
  int64_t height, width;
  int channels;        /* 1 gray, 2 gray + alpha, 3 RGB, 4 RGBA */
  int depth;           /* bits per channel: 8 or 16 (16 is big-endian) */
  unsigned char *data; /* height x width x channels samples, row-major; free() */
} rt_png;

/* Decodes a whole PNG from read (its 8-byte signature included):
 * palettes become RGB, gray of 1, 2 or 4 bits becomes 8-bit, a tRNS chunk
 * becomes an alpha channel; 8- and 16-bit channels stay as they are. A
 * malformed or truncated image, or one of more than max_bytes of pixels,
 * is an error at path. */
bool rt_png_decode(rt_png_read_fn read, void *ctx, const char *path, int64_t max_bytes, rt_png *out,
                   diag_sink *d);

#endif
