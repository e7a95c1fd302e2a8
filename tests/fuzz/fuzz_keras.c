/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_keras.c: the Keras frontend (frontend/keras: config lowering, the
 * layer table, weight binding, policies, compile_config) on arbitrary
 * config.json text and weights. The input is a 4-byte little-endian length
 * L, then L bytes of config.json (L taken modulo what is left), then
 * model.weights.h5; the target wraps them, with a Keras 3 metadata.json, in
 * a stored ZIP and loads it with fe_load_mem, so mutations reach the
 * config and the weights, not the archive's CRCs (fuzz_zip covers those).
 * A graph that loads goes on to the optimizer's variables (resuming training,
 * fe_keras_load_optimizer) for states shaped like castor's training program
 * (each weight, its slots for the optimizer compile_config names, the
 * optimizer scalars), and, when they load, to writing the model back
 * (fe_keras_save, into a scratch directory).
 * Invariants: a graph that verifies, or at least one error; never both; the
 * optimizer reader and the writer fail with an error or succeed without one.
 */
#include "tests/fuzz/fuzz.h"

#include <stdbool.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "frontend/frontend.h"

static void put(unsigned char **p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) *(*p)++ = (unsigned char)(v >> (8 * i));
}

/* The program states castor's trainer would have for g under optimizer opt
 * (api/castor.c, keras_resume): weights, their slots, the scalars. */
static int program_states(const ir_graph *g, const char *opt, fe_keras_state *st, int cap, void **bufs) {
  static const int64_t none[1] = {0};
  bool adam = !strcmp(opt, "adam") || !strcmp(opt, "adamw");
  static const char *const adam_slots[] = {"momentum", "velocity"}, *const rms_slots[] = {"velocity"},
                           *const sgd_slots[] = {"momentum"};
  const char *const *slots = adam ? adam_slots : !strcmp(opt, "rmsprop") ? rms_slots : sgd_slots;
  int n_slots = adam ? 2 : 1, n = 0;
  static const char *const scalars[] = {"optimizer.iterations", "optimizer.learning_rate", "optimizer.loss_scale",
                                        "optimizer.good_steps"};
  for (int i = 0; i < 4 && n < cap; i++, n++) {
    bufs[n] = calloc(1, 8);
    st[n] = (fe_keras_state){scalars[i], i == 0 || i == 3 ? DT_I64 : DT_F32, 0, none, bufs[n], false};
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *w = g->nodes[i];
    int64_t numel = 1;
    if (w->op != IR_OP_CONST || !w->attr.weight || !ir_type_numel(&w->type, 1, &numel) || numel > (1 << 20)) continue;
    if (w->type.dtype != DT_F32 && w->type.dtype != DT_F16 && w->type.dtype != DT_BF16) continue;
    for (int k = -1; k < n_slots && n < cap; k++, n++) {
      bufs[n] = calloc((size_t)numel + 1, 4);
      char *name = malloc(strlen(w->attr.weight) + 32);
      sprintf(name, k < 0 ? "%s" : "%s.%s", w->attr.weight, k < 0 ? "" : slots[k]);
      st[n] = (fe_keras_state){name, k < 0 ? w->type.dtype : DT_F32, w->type.rank, w->type.dims, bufs[n], k < 0};
    }
  }
  return n;
}

static void resume_and_save(const ir_graph *g, const fe_keras_source *src, const fe_train_defaults *td) {
  enum { CAP = 512 };
  static char dir[64];
  if (!dir[0]) {
    strcpy(dir, "/tmp/fuzz_keras.XXXXXX");
    if (!mkdtemp(dir)) return;
  }
  const char *opt = td->optimizer[0] ? td->optimizer : "rmsprop";
  fe_keras_state *st = calloc(CAP, sizeof *st);
  void **bufs = calloc(CAP, sizeof *bufs);
  bool *loaded = calloc(CAP, sizeof *loaded);
  int n = program_states(g, opt, st, CAP, bufs), n_loaded = 0;
  bool schedule = td->lr_schedule[0] != 0;
  diag_sink *d = diag_sink_create();
  bool ok = fe_keras_load_optimizer(src, st, n, opt, schedule, false, loaded, &n_loaded, d);
  if (ok != (diag_error_count(d) == 0)) fuzz_fail("the optimizer reader's result and its errors disagree", diag_text(d));
  if (ok) {
    char path[96];
    snprintf(path, sizeof path, "%s/out.keras", dir);
    ok = fe_keras_save(src, path, st, n, opt, schedule, d);
    if (ok != (diag_error_count(d) == 0)) fuzz_fail("the writer's result and its errors disagree", diag_text(d));
    unlink(path);
  }
  diag_sink_destroy(d);
  for (int i = 0; i < n; i++) {
    if (i >= 4) free((void *)st[i].name); /* the weights' and slots' names; the scalars' are static */
    free(bufs[i]);
  }
  free(st), free(bufs), free(loaded);
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
  fe_options fo;
  fe_options_init(&fo);
  fe_keras_source *src = NULL;
  fo.keras_source = &src;
  ir_graph *g = fe_load_mem("fuzz.keras", (const char *)zip, (size_t)(q - zip), &fo, d, &td);
  if (g && diag_error_count(d) > 0) fuzz_fail("a graph came back with errors", diag_text(d));
  if (!g && diag_error_count(d) == 0) fuzz_fail("no graph and no error", diag_text(d));
  if (g && !ir_verify(g, d)) fuzz_fail("the frontend's graph does not verify", diag_text(d));
  if (g && src) resume_and_save(g, src, &td);
  fe_keras_source_destroy(src);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  free(zip);
  return 0;
}
