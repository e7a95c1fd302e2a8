/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resolve.c: binds each use of a value name to the layer that defines it,
 * then orders the layers for lowering. Runs after layers.c has read the
 * whole file, before lower.c.
 *
 * Scoping: a use refers to the latest definition of the name above it, so
 * `x = dense(x, ...)` chains; a use with no definition above refers to the
 * single definition at or below it (a forward reference). Forward
 * references make cycles possible; they are found by the topological sort
 * and reported once, with the cycle spelled out.
 *
 * Out: m->order holds every layer that can be lowered, in topological
 * order, stable (the earliest layer in the file whose inputs are ready comes
 * first). Layers on or behind a cycle are left out.
 */
#include "frontend/cast/internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- binding ---- */

/* The definitions of one value name, in file order. */
typedef struct defs {
  VEC(fe_layer *) v;
} defs;

enum { MAX_SUGGEST_LAYERS = 2000 }; /* suggestions cost an edit distance per name */

/* Binds one use at statement `seq`; reports and leaves def NULL on failure. */
static void bind(fe_model *m, const hmap *vars, fe_use *u, int seq) {
  defs *ds = hmap_get_str(vars, u->var, strlen(u->var));
  if (fe_error_limit(m)) return;
  if (ds) {
    size_t lo = 0, hi = ds->v.len; /* first definition at or below seq */
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (ds->v.data[mid]->seq < seq) lo = mid + 1;
      else hi = mid;
    }
    size_t n_below = ds->v.len - lo;
    if (lo > 0) {
      u->def = ds->v.data[lo - 1];
      return;
    }
    if (n_below == 1) {
      u->def = ds->v.data[lo];
      return;
    }
    diag_error(m->d, u->loc, "ambiguous forward reference to '%s': it is defined %zu times below",
               u->var, n_below);
    for (size_t i = 0; i < ds->v.len && i < FE_MAX_NOTES; i++)
      diag_note(m->d, ds->v.data[i]->var_loc, "'%s' is defined here", u->var);
    return;
  }
  const char *near = NULL;
  if (m->layers.len <= MAX_SUGGEST_LAYERS) {
    VEC(const char *) names = {0};
    for (size_t i = 0; i < m->layers.len; i++) vec_push(&names, m->layers.data[i]->var);
    near = fe_closest(u->var, names.data, (int)names.len);
    vec_free(&names);
  }
  if (near)
    diag_error(m->d, u->loc, "use of undefined value '%s'; did you mean '%s'?", u->var, near);
  else
    diag_error(m->d, u->loc, "use of undefined value '%s'", u->var);
}

/* Spells out one cycle among the layers that the sort could not place. */
static void report_cycle(fe_model *m, const bool *placed) {
  size_t n = m->layers.len;
  int *step = xmalloc(n * sizeof *step); /* visit number, -1 unvisited */
  for (size_t i = 0; i < n; i++) step[i] = -1;
  /* Every unplaced layer has an unplaced input; walk inputs until a layer
   * repeats. The walk goes against the data flow. */
  VEC(fe_layer *) walk = {0};
  fe_layer *l = NULL;
  for (size_t i = 0; i < n && !l; i++)
    if (!placed[i]) l = m->layers.data[i];
  CASTOR_ASSERT(l);
  while (step[l->index] < 0) {
    step[l->index] = (int)walk.len;
    vec_push(&walk, l);
    fe_layer *next = NULL;
    for (int k = 0; k < l->n_inputs && !next; k++)
      if (l->inputs[k].def && !placed[l->inputs[k].def->index]) next = l->inputs[k].def;
    CASTOR_ASSERT(next);
    l = next;
  }
  /* cycle = walk[step[l]..], each entry consumes the next; reverse it into
   * data-flow order and start at the earliest layer in the file. */
  size_t first = (size_t)step[l->index], len = walk.len - first;
  fe_layer **cyc = xmalloc(len * sizeof *cyc);
  for (size_t i = 0; i < len; i++) cyc[i] = walk.data[walk.len - 1 - i];
  size_t start = 0;
  for (size_t i = 1; i < len; i++)
    if (cyc[i]->index < cyc[start]->index) start = i;
  str_buf b;
  str_buf_init(&b);
  for (size_t i = 0; i <= len; i++) {
    if (i == FE_MAX_NOTES && len > 2 * FE_MAX_NOTES) { /* a long one: its ends tell enough */
      str_buf_printf(&b, " -> ... (%zu more)", len - 2 * FE_MAX_NOTES);
      i = len - FE_MAX_NOTES;
    }
    str_buf_printf(&b, "%s%s", i ? " -> " : "", cyc[(start + i) % len]->var);
  }
  fe_layer *head = cyc[start];
  diag_error(m->d, head->loc, "cycle in the model: %s", str_buf_cstr(&b));
  for (size_t i = 1; i < len && i <= FE_MAX_NOTES; i++) {
    fe_layer *from = cyc[(start + i - 1) % len], *to = cyc[(start + i) % len];
    for (int k = 0; k < to->n_inputs; k++)
      if (to->inputs[k].def == from) {
        diag_note(m->d, to->inputs[k].loc, "'%s' uses '%s' here", to->var, from->var);
        break;
      }
  }
  str_buf_fini(&b);
  free(cyc);
  vec_free(&walk);
  free(step);
}

/* ---- a binary min-heap of layer indices: the ready set of the sort ---- */

typedef struct heap {
  VEC(int) v;
} heap;

static void heap_push(heap *h, int x) {
  vec_push(&h->v, x);
  for (size_t i = h->v.len - 1; i > 0;) {
    size_t parent = (i - 1) / 2;
    if (h->v.data[parent] <= h->v.data[i]) break;
    int t = h->v.data[parent];
    h->v.data[parent] = h->v.data[i], h->v.data[i] = t;
    i = parent;
  }
}

static int heap_pop(heap *h) {
  int top = h->v.data[0];
  h->v.data[0] = h->v.data[--h->v.len];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, min = i;
    if (l < h->v.len && h->v.data[l] < h->v.data[min]) min = l;
    if (r < h->v.len && h->v.data[r] < h->v.data[min]) min = r;
    if (min == i) break;
    int t = h->v.data[min];
    h->v.data[min] = h->v.data[i], h->v.data[i] = t;
    i = min;
  }
  return top;
}

void fe_resolve(fe_model *m) {
  size_t n = m->layers.len;
  hmap vars; /* value name -> its definitions */
  hmap_init(&vars, HMAP_STRINGS);
  VEC(defs *) all_defs = {0};
  for (size_t i = 0; i < n; i++) {
    fe_layer *l = m->layers.data[i];
    defs *ds = hmap_get_str(&vars, l->var, strlen(l->var));
    if (!ds) {
      ds = xcalloc(1, sizeof *ds);
      vec_push(&all_defs, ds);
      hmap_put_str(&vars, l->var, strlen(l->var), ds);
    }
    vec_push(&ds->v, l);
  }
  for (size_t i = 0; i < n; i++) {
    fe_layer *l = m->layers.data[i];
    for (int k = 0; k < l->n_inputs; k++) bind(m, &vars, &l->inputs[k], l->seq);
  }
  for (size_t i = 0; i < m->outputs.len; i++)
    bind(m, &vars, &m->outputs.data[i].use, m->outputs.data[i].seq);
  for (size_t i = 0; i < all_defs.len; i++) {
    vec_free(&all_defs.data[i]->v);
    free(all_defs.data[i]);
  }
  vec_free(&all_defs);
  hmap_fini(&vars);

  /* Stable Kahn: repeatedly place the earliest layer (in the file) whose
   * inputs are all placed. Unresolved uses do not block; lowering skips
   * their layers. */
  bool *placed = xcalloc(n + 1, sizeof *placed);
  int *pending = xcalloc(n + 1, sizeof *pending);
  VEC(int) *consumers = xcalloc(n + 1, sizeof *consumers);
  heap ready = {0};
  for (size_t i = 0; i < n; i++) {
    fe_layer *l = m->layers.data[i];
    for (int k = 0; k < l->n_inputs; k++) {
      if (!l->inputs[k].def) continue;
      pending[i]++;
      vec_push(&consumers[l->inputs[k].def->index], (int)i);
    }
    if (pending[i] == 0) heap_push(&ready, (int)i);
  }
  size_t n_placed = 0;
  while (ready.v.len) {
    int i = heap_pop(&ready);
    placed[i] = true;
    n_placed++;
    vec_push(&m->order, m->layers.data[i]);
    for (size_t c = 0; c < consumers[i].len; c++)
      if (--pending[consumers[i].data[c]] == 0) heap_push(&ready, consumers[i].data[c]);
  }
  /* Layers left out are on a cycle or fed by one. */
  if (n_placed < n) report_cycle(m, placed);
  for (size_t i = 0; i < n; i++) vec_free(&consumers[i]);
  free(consumers);
  vec_free(&ready.v);
  free(placed);
  free(pending);
}
