/* SPDX-License-Identifier: Apache-2.0 */
/*
 * png.c: PNG decoding through libpng (png.h). libpng reports errors by
 * longjmp; everything this file allocates before a setjmp point is reached
 * through `volatile` locals or the png structs, so an error at any point
 * frees it and becomes one diagnostic at the file. Warnings (a bad CRC in
 * an ancillary chunk, say) are not errors and are dropped, as libpng's
 * own tools do by default.
 */
#include "train/png.h"

#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
  rt_png_read_fn read;
  void *ctx;
  jmp_buf jmp;
  char why[200]; /* libpng's message, or ours */
} reader;

static void on_error(png_structp png, png_const_charp msg) {
  reader *r = png_get_error_ptr(png);
  snprintf(r->why, sizeof r->why, "%s", msg);
  longjmp(r->jmp, 1);
}

static void on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void on_read(png_structp png, png_bytep buf, size_t n) {
  reader *r = png_get_io_ptr(png);
  if (r->read(r->ctx, buf, (int64_t)n) < (int64_t)n) png_error(png, "truncated PNG file");
}

bool rt_png_decode(rt_png_read_fn read, void *ctx, const char *path, int64_t max_bytes, rt_png *out,
                   diag_sink *d) {
  memset(out, 0, sizeof *out);
  reader r = {.read = read, .ctx = ctx};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_error, on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  unsigned char *volatile data = NULL;
  png_bytep *volatile rows = NULL;
  if (!info) {
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    diag_error((d), (diag_loc){path, 0, 0}, "out of memory starting libpng");
    return false;
  }
  if (setjmp(r.jmp)) {
    png_destroy_read_struct(&png, &info, NULL);
    free(data);
    free(rows);
    diag_error(d, (diag_loc){path, 0, 0}, "cannot read the PNG image: %s", r.why);
    return false;
  }
  png_set_read_fn(png, &r, on_read);
  png_set_user_limits(png, 1u << 16, 1u << 16); /* libpng refuses larger dimensions */
  png_read_info(png, info);
  png_set_palette_to_rgb(png);
  png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  int channels = png_get_channels(png, info), depth = png_get_bit_depth(png, info);
  size_t rowbytes = png_get_rowbytes(png, info);
  /* w, h < 2^16 and rowbytes <= w * 8: the product fits */
  if ((int64_t)rowbytes * h > max_bytes) {
    snprintf(r.why, sizeof r.why, "%ux%u pixels of %d channels are more than %lld bytes", (unsigned)w,
             (unsigned)h, channels, (long long)max_bytes);
    longjmp(r.jmp, 1);
  }
  data = malloc(rowbytes * h + 1);
  rows = malloc(sizeof *rows * (h + 1));
  if (!data || !rows) {
    snprintf(r.why, sizeof r.why, "out of memory for %ux%u pixels", (unsigned)w, (unsigned)h);
    longjmp(r.jmp, 1);
  }
  for (png_uint_32 y = 0; y < h; y++) rows[y] = data + (size_t)y * rowbytes;
  png_read_image(png, rows);
  png_read_end(png, NULL);
  png_destroy_read_struct(&png, &info, NULL);
  free(rows);
  out->height = h, out->width = w, out->channels = channels, out->depth = depth;
  out->data = data;
  return true;
}
