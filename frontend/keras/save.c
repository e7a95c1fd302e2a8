/* SPDX-License-Identifier: Apache-2.0 */
/*
 * save.c: writing a loaded .keras model back (keras.h, fe_keras_save), as
 * Keras 3's saving_lib writes one: a stored ZIP (formats/zip.h) of
 * metadata.json, config.json and model.weights.h5 (formats/hdf5.h's
 * writer).
 *
 *   config.json       the loaded file's, byte for byte
 *   metadata.json     {"keras_version": the loaded file's, "date_saved": now}
 *   model.weights.h5  the loaded file's groups and attributes (the "name"
 *                     of each vars group, bfloat16's dtype attribute) and
 *                     datasets, with each weight the model bound replaced
 *                     by its trained value in its variable's dtype (float32,
 *                     float16, or bfloat16 as an opaque 2-byte type with
 *                     dtype="bfloat16"); the
 *                     optimizer's group rebuilt as Keras 3 saves it:
 *                       /optimizer/vars/0, 1, ...: iterations, learning_rate
 *                       (not with a schedule), then the slots of the
 *                       trainable weights in Keras's variable order:
 *                       Adam/AdamW per weight momentum, velocity; RMSprop
 *                       every velocity, then every momentum, then every
 *                       average_gradient; SGD every momentum;
 *                       when compile_config names a LossScaleOptimizer
 *                       (what Keras's load_model wraps: Keras 3 wraps a
 *                       mixed_float16 model's optimizer at compile, but a
 *                       loaded model's policy is the global one, float32
 *                       by default, so it does not wrap it at load) its
 *                       own iteration (0), learning_rate (0.0),
 *                       step_counter and dynamic_scale come first, and
 *                       /optimizer/inner_optimizer/vars repeats the inner
 *                       optimizer's.
 *
 * Integer scalars take the width the loaded file used (int32 from JAX,
 * int64 from TensorFlow), int64 without one.
 */
#include "frontend/keras/internal.h"

#include "formats/zip.h"
#include "util/half.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fe_keras_source {
  char keras_version[64];
  unsigned char *config;
  size_t config_len;
  unsigned char *h5_bytes;
  h5_file h5;
  int *weight_obj;    /* per weight, in Keras's order: its dataset */
  char **weight_key;  /* and its key in the IR */
  int n_weights;
  bool lso; /* compile_config names a LossScaleOptimizer: Keras loads the optimizer wrapped */
  char file[512]; /* the loaded file, for diagnostics */
};

void fe_keras_source_destroy(fe_keras_source *s) {
  if (!s) return;
  h5_fini(&s->h5);
  free(s->h5_bytes), free(s->config);
  for (int i = 0; i < s->n_weights; i++) free(s->weight_key[i]);
  free(s->weight_obj), free(s->weight_key);
  free(s);
}

static int cmp_bound(const void *a, const void *b) {
  const struct kr_bound *x = a, *y = b;
  return x->order != y->order ? (x->order < y->order ? -1 : 1) : x->index - y->index;
}

fe_keras_source *kr_source_new(kr_model *m, const char *keras_version, bool lso, unsigned char **cfg,
                               size_t cfg_len, unsigned char **h5) {
  fe_keras_source *s = xcalloc(1, sizeof *s);
  s->lso = lso;
  snprintf(s->file, sizeof s->file, "%s", m->file);
  snprintf(s->keras_version, sizeof s->keras_version, "%s", keras_version);
  s->config = *cfg, s->config_len = cfg_len, s->h5_bytes = *h5, s->h5 = m->h5;
  *cfg = NULL, *h5 = NULL;
  /* Keras's variable order: the config's layers, each layer's vars/i */
  if (m->bound.len) /* a model without weights has no vector: qsort(NULL, 0) is undefined */
    qsort(m->bound.data, m->bound.len, sizeof *m->bound.data, cmp_bound);
  s->weight_obj = xcalloc(m->bound.len + 1, sizeof *s->weight_obj);
  s->weight_key = xcalloc(m->bound.len + 1, sizeof *s->weight_key);
  hmap consts; /* data -> the weight key of the constant the lowering built from it */
  hmap_init(&consts, HMAP_POINTERS);
  for (int k = 0; k < m->g->n_nodes; k++) {
    const ir_node *n = m->g->nodes[k];
    if (n->op == IR_OP_CONST && n->attr.data && n->attr.weight && !hmap_get_ptr(&consts, n->attr.data))
      hmap_put_ptr(&consts, n->attr.data, (void *)n->attr.weight);
  }
  for (size_t i = 0; i < m->bound.len; i++) {
    const char *key = hmap_get_ptr(&consts, m->bound.data[i].data);
    if (!key) continue; /* read, but not made a weight (no lowering does this today) */
    s->weight_obj[s->n_weights] = m->bound.data[i].obj;
    s->weight_key[s->n_weights++] = xstrdup(key);
  }
  hmap_fini(&consts);
  return s;
}

/* ---- the weights file ---- */

typedef struct saver {
  const fe_keras_source *src;
  const char *path;
  diag_sink *d;
  VEC(h5w_object) objs;
  arena *a;
  const fe_keras_state *states;
  int n_states;
  hmap by_name;  /* state name -> the state */
  int *weight_of; /* per h5 object: its weight's index, or -1 */
  int int_size;   /* of the optimizer's integer scalars */
  bool lso_file; /* reading: the file has a LossScaleOptimizer's layout */
  VEC(const char *) names; /* per object: the program state it holds, or NULL (fe_keras_load_optimizer) */
} saver;

/* Appends w, which holds the program state `name` (NULL: none). */
static void push(saver *s, h5w_object w, const char *name) {
  vec_push(&s->objs, w);
  while (s->names.len + 1 < s->objs.len) vec_push(&s->names, NULL);
  vec_push(&s->names, name);
}

static const fe_keras_state *state(const saver *s, const char *name) {
  return hmap_get_str(&s->by_name, name, strlen(name));
}

static bool save_error(saver *s, const char *fmt, ...) CASTOR_PRINTF(2, 3);
static bool save_error(saver *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror_kind(s->d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){s->path, 0, 0}, fmt, ap);
  va_end(ap);
  return false;
}

/* What of the loaded file's object o the writer (formats/hdf5_write.c)
 * cannot write back: checked by fe_keras_save_check before training and
 * again by the save. */
static bool writable_object(saver *s, const h5_object *o) {
  for (int i = 0; i < o->n_attrs; i++)
    if (!o->attrs[i].str)
      return save_error(s, "cannot write the model back: attribute '%s' of '%s' in its model.weights.h5 is not "
                           "a string (castor writes string attributes)", o->attrs[i].name, o->path);
  if (o->is_dataset && o->type.cls != H5_CLASS_FLOAT && o->type.cls != H5_CLASS_INT && o->type.cls != H5_CLASS_OPAQUE)
    return save_error(s, "cannot write the model back: dataset '%s' of its model.weights.h5 is a string", o->path);
  return true;
}

static bool is_optimizer(const h5_object *o) {
  return !strcmp(o->path, "/optimizer") || str_has_prefix(o->path, "/optimizer/");
}

bool fe_keras_save_check(const fe_keras_source *src, const char *path, diag_sink *d) {
  saver s = {.src = src, .path = path, .d = d};
  for (int i = 0; i < src->h5.n_objects; i++)
    if (!is_optimizer(&src->h5.objects[i]) && !writable_object(&s, &src->h5.objects[i])) return false;
  return true;
}

static bool copy_attrs(saver *s, const h5_object *o, h5w_object *w) {
  if (!writable_object(s, o)) return false;
  h5w_attr *at = arena_alloc(s->a, ((size_t)o->n_attrs + 1) * sizeof *at);
  for (int i = 0; i < o->n_attrs; i++) at[i] = (h5w_attr){o->attrs[i].name, o->attrs[i].str};
  w->attrs = at, w->n_attrs = o->n_attrs;
  return true;
}

/* The loaded file's objects, each weight's dataset with its trained value. */
static bool model_objects(saver *s) {
  const h5_file *f = &s->src->h5;
  for (int i = 0; i < f->n_objects; i++) {
    const h5_object *o = &f->objects[i];
    if (is_optimizer(o)) {
      if (o->is_dataset && o->type.cls == H5_CLASS_INT && !strcmp(o->path, "/optimizer/vars/0"))
        s->int_size = (int)o->type.size;
      continue; /* rebuilt */
    }
    h5w_object w = {.path = o->path, .is_dataset = o->is_dataset};
    if (!copy_attrs(s, o, &w)) return false;
    if (o->is_dataset) {
      w.type = o->type, w.rank = o->rank, w.data = o->data;
      memcpy(w.dims, o->dims, sizeof w.dims);
      int k = s->weight_of[i];
      /* a weight castor trained; one no gradient reaches has no state and stays as loaded */
      const fe_keras_state *st = k >= 0 ? state(s, s->src->weight_key[k]) : NULL;
      if (st) {
        bool same = st->rank == o->rank;
        for (int r = 0; r < o->rank; r++) same &= st->dims[r] == o->dims[r];
        if (!same || (st->dtype != DT_F32 && st->dtype != DT_F16 && st->dtype != DT_BF16))
          return save_error(s, "cannot write weight '%s' into dataset '%s': its shape differs from the loaded "
                               "file's", st->name, o->path);
        /* the variable's own dtype, which may differ from the file's (layer normalization's gamma and
         * beta: f32 in castor under float16, f16 in Keras): the round trip stays exact, and Keras
         * casts a dataset to its variable's dtype when it loads it */
        w.data = st->data;
        w.type = st->dtype == DT_F32 ? (h5_type){H5_CLASS_FLOAT, 4, false}
                 : st->dtype == DT_F16 ? (h5_type){H5_CLASS_FLOAT, 2, false} : (h5_type){H5_CLASS_OPAQUE, 2, false};
        h5w_attr *at = arena_alloc(s->a, ((size_t)w.n_attrs + 1) * sizeof *at);
        int n_at = 0;
        for (int a = 0; a < w.n_attrs; a++)
          if (strcmp(w.attrs[a].name, "dtype") != 0) at[n_at++] = w.attrs[a];
        if (st->dtype == DT_BF16) at[n_at++] = (h5w_attr){"dtype", "bfloat16"};
        w.attrs = at, w.n_attrs = n_at;
      }
    }
    vec_push(&s->objs, w);
  }
  return true;
}

static void group(saver *s, const char *path, const char *name_attr) {
  h5w_object w = {.path = path};
  if (name_attr) {
    h5w_attr *at = arena_alloc(s->a, sizeof *at);
    *at = (h5w_attr){"name", arena_strdup(s->a, name_attr)};
    w.attrs = at, w.n_attrs = 1;
  }
  vec_push(&s->objs, w);
}

/* vars/i of dir: a state's value (int64 narrowed to int_size for integers), or zeros like `like`. */
static bool var(saver *s, const char *dir, int *i, const fe_keras_state *st, const h5_object *like) {
  h5w_object w = {.path = arena_printf(s->a, "%s/%d", dir, (*i)++), .is_dataset = true};
  if (!st) { /* a weight castor did not train: Keras's slot starts at zero */
    w.type = like->type, w.rank = like->rank;
    memcpy(w.dims, like->dims, sizeof w.dims);
    w.data = arena_alloc(s->a, (size_t)like->nbytes + 1);
    memset((void *)w.data, 0, (size_t)like->nbytes + 1);
    if (like->n_attrs) copy_attrs(s, like, &w);
    push(s, w, NULL);
    return true;
  }
  w.rank = st->rank;
  for (int r = 0; r < st->rank; r++) w.dims[r] = st->dims[r];
  w.data = st->data;
  if (st->dtype == DT_I64 || st->dtype == DT_I32) {
    int64_t v = st->dtype == DT_I64 ? *(const int64_t *)st->data : *(const int32_t *)st->data;
    w.type = (h5_type){H5_CLASS_INT, (uint32_t)s->int_size, true};
    if (s->int_size == 4) {
      if (v > INT32_MAX || v < INT32_MIN)
        return save_error(s, "%s is %lld, more than the loaded file's int32 holds", st->name, (long long)v);
      int32_t *n = arena_alloc(s->a, 4);
      *n = (int32_t)v;
      w.data = n;
    } else {
      int64_t *n = arena_alloc(s->a, 8);
      *n = v;
      w.data = n;
    }
  } else if (st->dtype == DT_BF16) {
    static const h5w_attr bf = {"dtype", "bfloat16"};
    w.type = (h5_type){H5_CLASS_OPAQUE, 2, false};
    w.attrs = &bf, w.n_attrs = 1;
  } else {
    w.type = (h5_type){H5_CLASS_FLOAT, (uint32_t)dtype_size(st->dtype), false};
  }
  push(s, w, state(s, st->name) == st ? st->name : NULL); /* not a scalar() stand-in */
  return true;
}

static bool scalar(saver *s, const char *dir, int *i, const char *name, dtype_id t, double v) {
  const fe_keras_state *st = state(s, name);
  if (st) return var(s, dir, i, st, NULL);
  void *data = arena_alloc(s->a, 8);
  if (t == DT_F32) *(float *)data = (float)v;
  else *(int64_t *)data = (int64_t)v;
  fe_keras_state fake = {name, t, 0, NULL, data, false};
  return var(s, dir, i, &fake, NULL);
}

/* The inner optimizer's variables into dir. */
static bool inner_vars(saver *s, const char *dir, const char *opt, bool schedule) {
  int i = 0;
  if (!scalar(s, dir, &i, "optimizer.iterations", DT_I64, 0)) return false;
  if (!schedule && !scalar(s, dir, &i, "optimizer.learning_rate", DT_F32, 0)) return false;
  bool adam = !strcmp(opt, "adam") || !strcmp(opt, "adamw");
  static const char *const order_adam[] = {"momentum", "velocity"};
  static const char *const order_rms[] = {"velocity", "momentum", "average_gradient"};
  static const char *const order_sgd[] = {"momentum"};
  const char *const *slots = adam ? order_adam : !strcmp(opt, "rmsprop") ? order_rms : order_sgd;
  int n_slots = adam ? 2 : !strcmp(opt, "rmsprop") ? 3 : 1;
  /* which slot kinds the program has (RMSprop's momentum and average, SGD's momentum are optional) */
  bool present[3] = {false, false, false};
  for (int k = 0; k < n_slots; k++)
    for (int w = 0; w < s->src->n_weights && !present[k]; w++)
      present[k] = state(s, arena_printf(s->a, "%s.%s", s->src->weight_key[w], slots[k])) != NULL;
  if (!strcmp(opt, "rmsprop")) present[0] = true; /* velocity: always */
  if (adam) present[0] = present[1] = true;
  for (int pass = 0; pass < (adam ? 1 : n_slots); pass++) {
    for (int w = 0; w < s->src->n_weights; w++) {
      const fe_keras_state *wt = state(s, s->src->weight_key[w]);
      if (wt && !wt->trainable) continue;
      const h5_object *like = &s->src->h5.objects[s->src->weight_obj[w]];
      for (int k = adam ? 0 : pass; k < (adam ? 2 : pass + 1); k++) {
        if (!present[k]) continue;
        const fe_keras_state *st = state(s, arena_printf(s->a, "%s.%s", s->src->weight_key[w], slots[k]));
        if (!var(s, dir, &i, st, like)) return false;
      }
    }
  }
  return true;
}

static bool optimizer_objects(saver *s, const char *opt, bool schedule) {
  const h5_object *had = h5_find(&s->src->h5, "/optimizer");
  if (!had) return true; /* the model was saved without an optimizer: Keras builds none to load into */
  const h5_object *v = h5_find(&s->src->h5, "/optimizer/vars");
  const h5_object *iv = h5_find(&s->src->h5, "/optimizer/inner_optimizer/vars");
  const char *outer_name = v ? h5_attr_str(v, "name") : NULL, *inner_name = iv ? h5_attr_str(iv, "name") : NULL;
  /* Keras wraps the optimizer at load when compile_config names a LossScaleOptimizer (or the global
   * policy is mixed_float16 when load_model runs: not the default, so not written for) */
  bool lso = s->src->lso || s->lso_file;
  group(s, "/optimizer", NULL);
  if (!lso) {
    group(s, "/optimizer/vars", inner_name ? inner_name : outer_name ? outer_name : opt);
    return inner_vars(s, "/optimizer/vars", opt, schedule);
  }
  group(s, "/optimizer/vars", iv && outer_name ? outer_name : "loss_scale_optimizer");
  int i = 0;
  if (!scalar(s, "/optimizer/vars", &i, "loss_scale_optimizer.iteration", DT_I64, 0) ||
      !scalar(s, "/optimizer/vars", &i, "loss_scale_optimizer.learning_rate", DT_F32, 0) ||
      !scalar(s, "/optimizer/vars", &i, "optimizer.good_steps", DT_I64, 0) ||
      !scalar(s, "/optimizer/vars", &i, "optimizer.loss_scale", DT_F32, 32768))
    return false;
  /* the inner optimizer's variables follow in the outer list, and again in its own group */
  size_t before = s->objs.len;
  if (!inner_vars(s, "/optimizer/inner_optimizer/vars", opt, schedule)) return false;
  size_t after = s->objs.len;
  for (size_t k = before; k < after; k++) {
    h5w_object w = s->objs.data[k];
    w.path = arena_printf(s->a, "/optimizer/vars/%d", i++);
    push(s, w, k < s->names.len ? s->names.data[k] : NULL);
  }
  group(s, "/optimizer/inner_optimizer", NULL);
  group(s, "/optimizer/inner_optimizer/vars", inner_name ? inner_name : !iv && outer_name ? outer_name : opt);
  return true;
}

bool fe_keras_save(const fe_keras_source *src, const char *path, const fe_keras_state *states, int n_states,
                   const char *optimizer, bool schedule, diag_sink *d) {
  saver s = {.src = src, .path = path, .d = d, .a = arena_create(), .states = states, .n_states = n_states,
             .int_size = 8};
  unsigned char *h5 = NULL;
  size_t h5_len = 0;
  hmap_init(&s.by_name, HMAP_STRINGS);
  for (int i = 0; i < n_states; i++)
    if (!state(&s, states[i].name)) hmap_put_str(&s.by_name, states[i].name, strlen(states[i].name), (void *)&states[i]);
  s.weight_of = xmalloc(((size_t)src->h5.n_objects + 1) * sizeof *s.weight_of);
  for (int i = 0; i < src->h5.n_objects; i++) s.weight_of[i] = -1;
  for (int k = 0; k < src->n_weights; k++) s.weight_of[src->weight_obj[k]] = k;
  bool ok = model_objects(&s) && optimizer_objects(&s, optimizer, schedule);
  if (ok) {
    h5_error he;
    if (!(ok = h5_write(s.objs.data, (int)s.objs.len, &h5, &h5_len, &he)))
      diag_error_kind(d, DIAG_KIND_INTERNAL, (diag_loc){path, 0, 0}, "model.weights.h5: %s", he.msg);
  }
  if (ok) {
    char date[64] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%d@%H:%M:%S", &tm);
    const char *meta = arena_printf(s.a, "{\"keras_version\": \"%s\", \"date_saved\": \"%s\"}", src->keras_version,
                                    date);
    zip_entry members[] = {{"metadata.json", meta, strlen(meta)},
                           {"config.json", src->config, src->config_len},
                           {"model.weights.h5", h5, h5_len}};
    ok = zip_write(path, members, 3, false, d);
  }
  free(h5);
  hmap_fini(&s.by_name);
  free(s.weight_of);
  vec_free(&s.objs);
  vec_free(&s.names);
  arena_destroy(s.a);
  return ok;
}

/* ---- reading the optimizer's variables back (resuming training) ---- */

/* A dataset's element e as a double (float32, float16, bfloat16 as Keras
 * stores it, signed integers of 4 or 8 bytes), false for another type. */
static bool element(const h5_object *o, int64_t e, double *out) {
  const unsigned char *p = (const unsigned char *)o->data + e * (int64_t)o->type.size;
  uint64_t bits = 0;
  for (uint32_t b = 0; b < o->type.size && b < 8; b++) bits |= (uint64_t)p[b] << (8 * b);
  const char *dt = h5_attr_str(o, "dtype");
  if (o->type.cls == H5_CLASS_FLOAT && o->type.size == 4) {
    float f;
    uint32_t u = (uint32_t)bits;
    memcpy(&f, &u, 4);
    return *out = f, true;
  }
  if (o->type.cls == H5_CLASS_FLOAT && o->type.size == 2) return *out = half_f16_to_f32((uint16_t)bits), true;
  if (o->type.cls == H5_CLASS_OPAQUE && o->type.size == 2 && dt && !strcmp(dt, "bfloat16"))
    return *out = half_bf16_to_f32((uint16_t)bits), true;
  if (o->type.cls == H5_CLASS_INT && o->type.size == 8) return *out = (double)(int64_t)bits, true;
  if (o->type.cls == H5_CLASS_INT && o->type.size == 4) return *out = (double)(int32_t)(uint32_t)bits, true;
  return false;
}

/* A value of the optimizer's state read from the file, before training
 * starts from it: counts (iterations, the loss scale's good steps) are
 * whole numbers from 0 that fit the state, the learning rate and the loss
 * scale are positive, and every float is finite; else an error naming the
 * dataset, castor's variable and the element. */
static bool state_value_ok(const fe_keras_source *src, const char *path, const char *name, dtype_id dt,
                           int64_t n, int64_t e, double v, diag_sink *d) {
  char at[48] = "";
  if (n > 1) snprintf(at, sizeof at, " element %lld", (long long)e);
  const char *why = NULL;
  if ((dt == DT_I64 || dt == DT_I32) && v < 0) why = "a count cannot be negative";
  else if (dt == DT_I32 && v > INT32_MAX) why = "more than its int32 variable holds";
  else if (!isfinite(v)) why = "an optimizer's state must be finite";
  else if ((!strcmp(name, "optimizer.learning_rate") || !strcmp(name, "optimizer.loss_scale")) && !(v > 0))
    why = "it must be positive";
  if (!why) return true;
  diag_error_kind(d, DIAG_KIND_INVALID_MODEL, (diag_loc){src->file, 0, 0},
                  "model.weights.h5: optimizer variable '%s' (castor's %s)%s is %.9g: %s", path, name, at, v, why);
  return false;
}

static void shape_text(str_buf *b, int rank, const int64_t *dims) {
  str_buf_putc(b, '[');
  for (int r = 0; r < rank; r++) str_buf_printf(b, "%s%lld", r ? ", " : "", (long long)dims[r]);
  str_buf_putc(b, ']');
}

bool fe_keras_load_optimizer(const fe_keras_source *src, const fe_keras_state *states, int n_states,
                             const char *optimizer, bool schedule, bool skip_lr, bool *loaded, int *n_loaded,
                             diag_sink *d) {
  *n_loaded = 0;
  for (int i = 0; i < n_states; i++) loaded[i] = false;
  if (!h5_find(&src->h5, "/optimizer/vars")) return true; /* saved without an optimizer */
  saver s = {.src = src, .path = "model.weights.h5", .d = d, .a = arena_create(), .states = states,
             .n_states = n_states, .int_size = 8,
             /* Keras wraps a mixed_float16 model's optimizer at compile without naming the
              * LossScaleOptimizer in compile_config: the file's groups say which it saved */
             .lso_file = h5_find(&src->h5, "/optimizer/inner_optimizer/vars") != NULL};
  hmap_init(&s.by_name, HMAP_STRINGS);
  for (int i = 0; i < n_states; i++)
    if (!state(&s, states[i].name)) hmap_put_str(&s.by_name, states[i].name, strlen(states[i].name), (void *)&states[i]);
  bool ok = optimizer_objects(&s, optimizer, schedule);
  /* the layout castor writes for this model and optimizer against the file's /optimizer/vars */
  int want = 0, scalars = 0, have = 0;
  for (size_t k = 0; ok && k < s.objs.len; k++)
    if (s.objs.data[k].is_dataset && str_has_prefix(s.objs.data[k].path, "/optimizer/vars/")) {
      want++;
      if (s.objs.data[k].rank == 0) scalars += want == scalars + 1;
    }
  while (h5_find(&src->h5, arena_printf(s.a, "/optimizer/vars/%d", have))) have++;
  if (ok && have <= scalars && want > scalars) {
    /* only the scalars: saved before the optimizer was built (before any fit); Keras
     * starts its slots at zero then too */
  } else if (ok && have != want) {
    ok = false;
    diag_error_kind(d, DIAG_KIND_INVALID_MODEL, (diag_loc){src->file, 0, 0},
                    "model.weights.h5: /optimizer/vars has %d variables, castor's %s for this model has %d (%d scalars, then the "
                    "slots of each trainable weight in Keras's order): the file's optimizer state does not fit "
                    "this model (castor resumes from it when training with the optimizer compile_config names; "
                    "--optimizer with another one starts afresh)", have, optimizer, want, scalars);
  } else {
    for (size_t k = 0; ok && k < s.objs.len; k++) {
      const h5w_object *w = &s.objs.data[k];
      const char *name = k < s.names.len ? s.names.data[k] : NULL;
      if (!w->is_dataset || !name || !str_has_prefix(w->path, "/optimizer/vars/")) continue;
      if (skip_lr && !strcmp(name, "optimizer.learning_rate")) continue;
      const fe_keras_state *st = state(&s, name);
      const h5_object *o = h5_find(&src->h5, w->path);
      bool same = o && o->is_dataset && o->rank == st->rank;
      for (int r = 0; same && r < st->rank; r++) same = o->dims[r] == st->dims[r];
      if (!same) {
        str_buf want_s, have_s;
        str_buf_init(&want_s), str_buf_init(&have_s);
        shape_text(&want_s, st->rank, st->dims);
        if (o && o->is_dataset) shape_text(&have_s, o->rank, o->dims);
        else str_buf_puts(&have_s, "not a dataset");
        diag_error_kind(d, DIAG_KIND_INVALID_MODEL, (diag_loc){src->file, 0, 0},
                        "model.weights.h5: optimizer variable '%s' is %s, castor's %s for it is %s", w->path, str_buf_cstr(&have_s),
                        name, str_buf_cstr(&want_s));
        str_buf_fini(&want_s), str_buf_fini(&have_s);
        ok = false;
        break;
      }
      int64_t n = 1;
      for (int r = 0; r < st->rank; r++) n *= st->dims[r];
      void *dst = (void *)st->data;
      for (int64_t e = 0; e < n && ok; e++) {
        double v;
        if (!element(o, e, &v)) {
          diag_error_kind(d, DIAG_KIND_UNSUPPORTED, (diag_loc){src->file, 0, 0},
                          "model.weights.h5: optimizer variable '%s' (castor's %s) has a type castor does not read (float32, float16, "
                          "bfloat16, int32, int64)", w->path, name);
          ok = false;
          break;
        }
        bool is_int = o->type.cls == H5_CLASS_INT;
        if ((st->dtype == DT_I64 || st->dtype == DT_I32) != is_int) {
          diag_error_kind(d, DIAG_KIND_INVALID_MODEL, (diag_loc){src->file, 0, 0},
                          "model.weights.h5: optimizer variable '%s' is %s, castor's %s is %s", w->path, is_int ? "an integer" : "a float",
                          name, is_int ? "a float" : "an integer");
          ok = false;
          break;
        }
        if (!state_value_ok(src, w->path, name, st->dtype, n, e, v, d)) {
          ok = false;
          break;
        }
        switch (st->dtype) {
        case DT_I64: ((int64_t *)dst)[e] = (int64_t)v; break;
        case DT_I32: ((int32_t *)dst)[e] = (int32_t)v; break;
        case DT_F32: ((float *)dst)[e] = (float)v; break;
        case DT_F16: ((uint16_t *)dst)[e] = half_f32_to_f16((float)v); break;
        case DT_BF16: ((uint16_t *)dst)[e] = half_f32_to_bf16((float)v); break;
        case DT_I1:
        case DT_COUNT:
        default:
          diag_error_kind(d, DIAG_KIND_INTERNAL, (diag_loc){src->file, 0, 0}, "state %s has dtype %s", name,
                          dtype_name(st->dtype));
          ok = false;
        }
      }
      if (ok) loaded[st - states] = true, (*n_loaded)++;
    }
  }
  hmap_fini(&s.by_name);
  vec_free(&s.objs);
  vec_free(&s.names);
  arena_destroy(s.a);
  return ok;
}
