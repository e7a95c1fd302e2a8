/*
 * fuzz_keras.c: the Keras frontend (frontend/keras: config lowering, the
 * layer table, weight binding, policies, compile_config) on arbitrary
 * config.json text and weights. The input is a 4-byte little-endian length
 * L, then L bytes of config.json (L taken modulo what is left), then
 * model.weights.h5; the target wraps them, with a Keras 3 metadata.json, in
 * a stored ZIP and loads it with fe_load_mem, so mutations reach the
 * config and the weights, not the archive's CRCs (fuzz_zip covers those).
 * Invariants: a graph that verifies, or at least one error; never both.
 */
#include "tests/fuzz/fuzz.h"

#include <string.h>
#include <zlib.h>

#include "frontend/frontend.h"

static void put(unsigned char **p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) *(*p)++ = (unsigned char)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4) return 0;
  size_t rest = size - 4;
  size_t cl = (data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24) % (rest + 1);
  static const char meta[] = "{\"keras_version\": \"3.15.1\"}";
  struct {
    const char *name;
    const uint8_t *p;
    size_t n;
  } parts[3] = {{"metadata.json", (const uint8_t *)meta, sizeof meta - 1},
                {"config.json", data + 4, cl},
                {"model.weights.h5", data + 4 + cl, rest - cl}};
  unsigned char *zip = malloc(size + 512), *q = zip;
  size_t offs[3];
  for (int i = 0; i < 3; i++) {
    uint32_t crc = (uint32_t)crc32(0, parts[i].p, (uInt)parts[i].n);
    offs[i] = (size_t)(q - zip);
    put(&q, 0x04034b50, 4), put(&q, 20, 2), put(&q, 0, 2), put(&q, 0, 2), put(&q, 0, 4), put(&q, crc, 4);
    put(&q, parts[i].n, 4), put(&q, parts[i].n, 4), put(&q, strlen(parts[i].name), 2), put(&q, 0, 2);
    memcpy(q, parts[i].name, strlen(parts[i].name)), q += strlen(parts[i].name);
    if (parts[i].n) memcpy(q, parts[i].p, parts[i].n), q += parts[i].n;
  }
  size_t cd = (size_t)(q - zip);
  for (int i = 0; i < 3; i++) {
    uint32_t crc = (uint32_t)crc32(0, parts[i].p, (uInt)parts[i].n);
    put(&q, 0x02014b50, 4), put(&q, 20, 2), put(&q, 20, 2), put(&q, 0, 2), put(&q, 0, 2), put(&q, 0, 4);
    put(&q, crc, 4), put(&q, parts[i].n, 4), put(&q, parts[i].n, 4), put(&q, strlen(parts[i].name), 2);
    put(&q, 0, 2), put(&q, 0, 2), put(&q, 0, 2), put(&q, 0, 2), put(&q, 0, 4), put(&q, offs[i], 4);
    memcpy(q, parts[i].name, strlen(parts[i].name)), q += strlen(parts[i].name);
  }
  size_t end = (size_t)(q - zip);
  put(&q, 0x06054b50, 4), put(&q, 0, 4), put(&q, 3, 2), put(&q, 3, 2), put(&q, end - cd, 4), put(&q, cd, 4);
  put(&q, 0, 2);

  diag_sink *d = diag_sink_create();
  fe_train_defaults td;
  ir_graph *g = fe_load_mem("fuzz.keras", (const char *)zip, (size_t)(q - zip), NULL, d, &td);
  if (g && diag_error_count(d) > 0) fuzz_fail("a graph came back with errors", diag_text(d));
  if (!g && diag_error_count(d) == 0) fuzz_fail("no graph and no error", diag_text(d));
  if (g && !ir_verify(g, d)) fuzz_fail("the frontend's graph does not verify", diag_text(d));
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  free(zip);
  return 0;
}
