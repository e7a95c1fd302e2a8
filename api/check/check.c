/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c: castor_check, the numerics debugger (castor check; castor.h).
 *
 * Two builds of one model on one target: the build under test (the
 * caller's compile options) and the float32 reference (policy float32, no
 * autocast options). Each is compiled twice through the one compile driver
 * (castor_compile_to): as castor_compile builds it, to run the model's
 * outputs exactly as `castor run` computes them, and "observed", the final
 * graph cloned with every non-leaf value marked as an extra output, so one
 * run yields every intermediate value. Marking a value as an output only
 * stops the planner from fusing past it; kernels round each value to its
 * dtype whether fused or not, so the observed values are the values of the
 * plain build (check_check.c tests that the outputs agree bit for bit).
 *
 * Values of the two builds are matched by name (value names are stable
 * across passes); a cast or a slice is matched with its operand's float32
 * value, a weight by its weight key. The verdict compares the plain
 * builds' outputs; when they are off, the search (ddmin: bisection over the
 * complement of halves, then of smaller chunks) looks for a smallest set of
 * 16-bit layers to force to float32, each trial a compile and a run, and
 * the set found is verified by a final run.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "api/check/check_internal.h"
#include "util/half.h"

void castor_check_options_init(castor_check_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  castor_compile_options_init(&o->compile);
  o->batch = 1;
  o->seed = 1;
  o->search = 1;
}

static void widen(ir_dtype t, const void *src, int64_t n, float *dst) {
  switch (t) {
  case DT_F32: memcpy(dst, src, (size_t)n * sizeof *dst); return;
  case DT_F16:
    for (int64_t i = 0; i < n; i++) dst[i] = half_f16_to_f32(((const uint16_t *)src)[i]);
    return;
  case DT_BF16:
    for (int64_t i = 0; i < n; i++) dst[i] = half_bf16_to_f32(((const uint16_t *)src)[i]);
    return;
  case DT_I32:
    for (int64_t i = 0; i < n; i++) dst[i] = (float)((const int32_t *)src)[i];
    return;
  case DT_I64:
    for (int64_t i = 0; i < n; i++) dst[i] = (float)((const int64_t *)src)[i];
    return;
  case DT_I1:
    for (int64_t i = 0; i < n; i++) dst[i] = ((const uint8_t *)src)[i] ? 1.0f : 0.0f;
    return;
  case DT_COUNT: break;
  }
  CASTOR_UNREACHABLE();
}

/* ---- observed builds ---- */

typedef struct observe_req {
  castor_check_report *r;
  chk_build *b;
  castor_tensor *const *in;
  int n_in;
  int64_t batch;
  bool keep_dot;
} observe_req;

static void value_init(arena *a, chk_value *v, const ir_node *n, int64_t batch) {
  memset(v, 0, sizeof *v);
  v->name = arena_strdup(a, n->name);
  v->layer = n->layer ? arena_strdup(a, n->layer) : NULL;
  v->weight = n->op == IR_OP_CONST && n->attr.weight ? arena_strdup(a, n->attr.weight) : NULL;
  v->op = n->op;
  v->dtype = n->type.dtype;
  v->rank = n->type.rank;
  for (int k = 0; k < n->type.rank; k++) v->dims[k] = n->type.dims[k] < 0 ? batch : n->type.dims[k];
  CASTOR_ASSERT(ir_type_numel(&n->type, batch, &v->numel));
  v->src = n->n_srcs ? n->srcs[0]->id : -1;
  v->match = -1;
  v->v = xmalloc((size_t)v->numel * sizeof *v->v + 1);
}

/* The codegen callback: compiles g with every value as an output, runs it
 * once and keeps every value of the run. */
static castor_status observe_fn(const ir_graph *g, const cg_backend *be, const cg_backend_options *bo, void *arg,
                                diag_sink *d) {
  observe_req *q = arg;
  ir_graph *og = ir_graph_clone(g);
  int n0 = og->n_outputs, n = og->n_nodes;
  for (int i = 0; i < n; i++)
    if (!(ir_op_flags(og->nodes[i]->op) & IR_OPF_LEAF)) ir_graph_add_output(og, og->nodes[i]->name, og->nodes[i]);
  cg_exec *x = cg_backend_compile(be, og, bo, d);
  if (!x) {
    ir_graph_destroy(og);
    return castor_status_from_diag(d, CASTOR_ERR_CODEGEN);
  }
  CASTOR_ASSERT(x->desc->n_inputs == q->n_in && x->desc->n_outputs == og->n_outputs);
  int n_out = og->n_outputs;
  void **out = xcalloc((size_t)n_out + 1, sizeof *out);
  const void **in = xcalloc((size_t)q->n_in + 1, sizeof *in);
  for (int i = 0; i < q->n_in; i++) in[i] = castor_tensor_data(q->in[i]);
  for (int k = 0; k < n_out; k++) {
    int64_t bytes = 0;
    CASTOR_ASSERT(ir_type_bytes(&og->outputs[k].value->type, q->batch, &bytes));
    out[k] = aligned_alloc(64, ((size_t)bytes + 63) / 64 * 64 + 64);
  }
  castor_status st = CASTOR_OK;
  if (!be->run(x, q->batch, in, out, d)) st = castor_status_from_diag(d, CASTOR_ERR_DEVICE);
  if (st == CASTOR_OK) {
    chk_build *b = q->b;
    b->n = n;
    b->v = xcalloc((size_t)n + 1, sizeof *b->v);
    for (int i = 0, k = n0; i < n; i++) {
      const ir_node *node = g->nodes[i];
      CASTOR_ASSERT(node->id == i);
      chk_value *v = &b->v[i];
      value_init(q->r->arena, v, node, q->batch);
      if (node->op == IR_OP_LITERAL) { /* a leaf, not an output: its value (a recurrent layer's zero state) */
        for (int64_t e = 0; e < v->numel; e++) v->v[e] = (float)node->attr.value;
        continue;
      }
      CASTOR_ASSERT(node->op == IR_OP_INPUT || node->op == IR_OP_CONST || !(ir_op_flags(node->op) & IR_OPF_LEAF));
      const void *data = node->op == IR_OP_INPUT  ? castor_tensor_data(q->in[node->attr.index])
                         : node->op == IR_OP_CONST ? node->attr.data
                                                   : out[k++];
      if (data) widen(node->type.dtype, data, v->numel, v->v);
      else memset(v->v, 0, (size_t)v->numel * sizeof *v->v); /* constant without data: IR read from text */
    }
    b->n_outputs = g->n_outputs;
    b->out_value = xcalloc((size_t)g->n_outputs + 1, sizeof *b->out_value);
    for (int o = 0; o < g->n_outputs; o++) b->out_value[o] = g->outputs[o].value->id;
    if (q->keep_dot) {
      b->dot = ir_graph_clone(g);
      for (int i = 0; i < b->dot->n_nodes; i++) b->dot->nodes[i]->attr.data = NULL;
    }
  }
  for (int k = 0; k < n_out; k++) free(out[k]);
  free(out);
  free(in);
  cg_exec_destroy(x);
  ir_graph_destroy(og);
  return st;
}

static void build_fini(chk_build *b) {
  for (int i = 0; i < b->n; i++) free(b->v[i].v);
  free(b->v);
  free(b->out_value);
  ir_graph_destroy(b->dot);
  memset(b, 0, sizeof *b);
}

void castor_check_report_destroy(castor_check_report *r) {
  if (!r) return;
  build_fini(&r->test);
  build_fini(&r->ref);
  free(r->layers);
  free(r->grads);
  str_buf_fini(&r->text);
  arena_destroy(r->arena);
  free(r);
}

/* ---- comparison ---- */

typedef struct cmp_result {
  double max_abs_err, rel_err, share_off;
  int64_t n_off;
  bool finite_ok; /* no element finite on one side and not on the other */
} cmp_result;

static bool same_nonfinite(double a, double b) { return (isnan(a) && isnan(b)) || (isinf(a) && a == b); }

/* got against want: normalized error, and the share of elements off by
 * more than tol * max |want| or finite on one side only. */
static cmp_result compare(const float *got, const float *want, int64_t n, double tol) {
  cmp_result c = {0, 0, 0, 0, true};
  double scale = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(want[i]) && fabs(want[i]) > scale) scale = fabs(want[i]);
  for (int64_t i = 0; i < n; i++) {
    double p = got[i], w = want[i];
    if (!isfinite(p) || !isfinite(w)) {
      if (!same_nonfinite(p, w)) c.max_abs_err = INFINITY, c.n_off++, c.finite_ok = false;
      continue;
    }
    double e = fabs(p - w);
    if (e > c.max_abs_err) c.max_abs_err = e;
    if (e > tol * scale) c.n_off++;
  }
  c.rel_err = scale > 0 ? c.max_abs_err / scale : c.max_abs_err > 0 ? INFINITY : 0;
  c.share_off = n ? (double)c.n_off / (double)n : 0;
  return c;
}

static bool same_dims(const chk_value *a, const chk_value *b) {
  if (a->rank != b->rank) return false;
  for (int k = 0; k < a->rank; k++)
    if (a->dims[k] != b->dims[k]) return false;
  return true;
}

/* The float32 build's value that test value i computes: the same name, or
 * for a weight the same weight key, with the same shape; a cast or a slice
 * is its operand's value converted or cut back to the original shape. */
static int find_match(const chk_build *test, const chk_build *ref, int i, const chk_value *shape) {
  const chk_value *t = &test->v[i];
  for (int k = 0; k < ref->n; k++) {
    const chk_value *w = &ref->v[k];
    if (!same_dims(w, shape) || !w->v) continue;
    if (t->op == IR_OP_CONST ? w->op == IR_OP_CONST && t->weight && w->weight && !strcmp(t->weight, w->weight)
                             : !strcmp(w->name, t->name))
      return k;
  }
  if ((t->op == IR_OP_CAST || t->op == IR_OP_SLICE) && t->src >= 0) return find_match(test, ref, t->src, shape);
  return -1;
}

static void compare_builds(castor_check_report *r, double tol) {
  for (int i = 0; i < r->test.n; i++) {
    chk_value *t = &r->test.v[i];
    for (int64_t e = 0; e < t->numel && t->v; e++) t->not_finite += !isfinite(t->v[e]);
    if (!t->v || (t->match = find_match(&r->test, &r->ref, i, t)) < 0) continue;
    cmp_result c = compare(t->v, r->ref.v[t->match].v, t->numel, tol);
    t->max_abs_err = c.max_abs_err, t->rel_err = c.rel_err, t->share_off = c.share_off;
  }
}

static castor_check_nonfinite first_nonfinite(const chk_build *b) {
  castor_check_nonfinite f;
  memset(&f, 0, sizeof f);
  for (int i = 0; i < b->n; i++) {
    const chk_value *v = &b->v[i];
    for (int64_t e = 0; e < v->numel && v->v; e++) {
      if (isfinite(v->v[e])) continue;
      f.found = 1;
      f.layer = v->layer ? v->layer : "";
      f.op = ir_op_name(v->op);
      f.value = v->name;
      f.index = e;
      f.rank = v->rank;
      f.x = v->v[e];
      for (int64_t k = v->rank, rest = e; k-- > 0; rest /= v->dims[k]) f.coords[k] = rest % v->dims[k];
      return f;
    }
  }
  return f;
}

/* ---- layers ---- */

typedef struct range_limits {
  double max, min_normal, zero; /* |x| > max overflows; 0 < |x| <= zero rounds to zero */
} range_limits;

static range_limits limits_of(ir_dtype t) {
  if (t == DT_BF16) return (range_limits){3.38953139e38, 0x1p-126, 0x1p-134};
  return (range_limits){65504.0, 0x1p-14, 0x1p-25};
}

static void count_range(const chk_value *v, range_limits L, int64_t *numel, int64_t *over, int64_t *sub,
                        int64_t *zero, double *max_abs) {
  if (!v->v) return;
  *numel += v->numel;
  for (int64_t e = 0; e < v->numel; e++) {
    double a = fabs(v->v[e]);
    if (!isfinite(a)) continue;
    if (a > *max_abs) *max_abs = a;
    if (a > L.max) ++*over;
    else if (a == 0) continue;
    else if (a <= L.zero) ++*zero;
    else if (a < L.min_normal) ++*sub;
  }
}

static bool list_has(const char *list, const char *name) {
  if (!list || !name) return false;
  size_t n = strlen(name);
  for (const char *p = list;;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return true;
    if (!e) return false;
    p = e + 1;
  }
}

/* Layer names of the build under test in order of first appearance. */
static int collect_layers(const chk_build *b, const char **names) {
  int n = 0;
  for (int i = 0; i < b->n; i++) {
    const char *l = b->v[i].layer;
    if (!l || b->v[i].op == IR_OP_CAST) continue;
    bool seen = false;
    for (int k = 0; k < n && !seen; k++) seen = !strcmp(names[k], l);
    if (!seen) names[n++] = l;
  }
  return n;
}

/* The layer's main value (its first contraction by the op table's kernel
 * class: a dense layer's matmul; else its last computed value, else its
 * input) and its result (the value named after it, else its last
 * compared value). */
static void layer_row(castor_check_report *r, const char *layer, castor_check_layer *row) {
  const chk_build *t = &r->test;
  int main = -1, result = -1, named = -1;
  for (int i = 0; i < t->n; i++) {
    const chk_value *v = &t->v[i];
    if (!v->layer || strcmp(v->layer, layer) || v->op == IR_OP_CAST) continue;
    if (v->op == IR_OP_CONST) continue;
    if (main < 0 || ir_op_kernel(t->v[main].op) != IR_KERNEL_CONTRACT) main = i;
    if (v->match >= 0) result = i;
    if (v->match >= 0 && !strcmp(v->name, layer)) named = i;
  }
  if (named >= 0) result = named;
  if (result < 0) result = main;
  memset(row, 0, sizeof *row);
  row->layer = layer;
  if (main >= 0) row->dtype = (castor_dtype)t->v[main].dtype;
  if (result >= 0) {
    const chk_value *v = &t->v[result];
    row->value = v->name;
    row->op = ir_op_name(v->op);
    row->numel = v->numel;
    row->compared = v->match >= 0;
    row->max_abs_error = v->max_abs_err, row->rel_error = v->rel_err, row->share_off = v->share_off;
  }
  row->limit_dtype = row->dtype == CASTOR_BF16 ? CASTOR_BF16 : CASTOR_F16;
  range_limits L = limits_of((ir_dtype)row->limit_dtype);
  for (int i = 0; i < r->ref.n; i++) {
    const chk_value *v = &r->ref.v[i];
    if (!v->layer || strcmp(v->layer, layer) || v->op == IR_OP_CAST) continue;
    if (v->op == IR_OP_CONST)
      count_range(v, L, &row->weight_numel, &row->weight_overflow, &row->weight_subnormal, &row->weight_zero,
                  &row->weight_max_abs);
    else
      count_range(v, L, &row->act_numel, &row->act_overflow, &row->act_subnormal, &row->act_zero, &row->act_max_abs);
  }
  for (int i = 0; i < t->n; i++)
    if (t->v[i].layer && !strcmp(t->v[i].layer, layer)) row->not_finite += t->v[i].not_finite;
}

/* ---- trials: the plain build under test with more layers in float32 ---- */

typedef struct search_state {
  castor_model *m;
  const castor_check_options *o;
  castor_tensor *const *in;
  int n_in;
  castor_tensor **want; /* the float32 build's outputs */
  int n_out;
  double tol;
  const char **cand; /* candidate layers, graph order */
  int n_cand;
  /* tried sets (bit k: cand[k]) and their answers */
  VEC(uint64_t) tried;
  VEC(char) passed;
  int n_trials;
  castor_status st; /* the first compile or run failure */
} search_state;

/* Worst normalized error of the outputs against the float32 build, and
 * whether they are within tol (finite where float32 is). */
static bool outputs_within(castor_tensor *const *got, castor_tensor *const *want, int n, double tol, double *worst) {
  bool ok = true;
  *worst = 0;
  for (int o = 0; o < n; o++) {
    int64_t ne = castor_tensor_numel(want[o]);
    float *g = xmalloc((size_t)ne * sizeof *g + 1), *w = xmalloc((size_t)ne * sizeof *w + 1);
    widen((ir_dtype)castor_tensor_dtype(got[o]), castor_tensor_data(got[o]), ne, g);
    widen((ir_dtype)castor_tensor_dtype(want[o]), castor_tensor_data(want[o]), ne, w);
    cmp_result c = compare(g, w, ne, tol);
    if (c.rel_err > *worst || isnan(c.rel_err)) *worst = c.rel_err;
    ok = ok && c.finite_ok && c.n_off == 0;
    free(g), free(w);
  }
  return ok;
}

static char *set_string(const search_state *s, uint64_t set) {
  str_buf b;
  str_buf_init(&b);
  const char *user = s->o->compile.fp32_layers;
  if (user && *user) str_buf_puts(&b, user);
  for (int k = 0; k < s->n_cand; k++)
    if (set >> k & 1) str_buf_printf(&b, "%s%s", b.len ? "," : "", s->cand[k]);
  return str_buf_take(&b);
}

/* Compiles and runs the build under test with `set` in float32. */
static bool trial(search_state *s, uint64_t set, bool use_cache, double *worst) {
  for (size_t i = 0; use_cache && i < s->tried.len; i++)
    if (s->tried.data[i] == set) return s->passed.data[i];
  castor_compile_options co = s->o->compile;
  char *layers = set_string(s, set);
  co.fp32_layers = *layers ? layers : NULL;
  castor_program *p = NULL;
  castor_tensor **got = xcalloc((size_t)s->n_out + 1, sizeof *got);
  bool ok = false;
  double w = INFINITY;
  s->n_trials++;
  castor_status st = castor_compile(s->m, &co, &p);
  if (st == CASTOR_OK) st = castor_program_run(p, s->in, s->n_in, got, s->n_out);
  if (st == CASTOR_OK) ok = outputs_within(got, s->want, s->n_out, s->tol, &w);
  else if (s->st == CASTOR_OK) s->st = st;
  for (int o = 0; o < s->n_out; o++) castor_tensor_destroy(got[o]);
  free(got);
  castor_program_destroy(p);
  free(layers);
  vec_push(&s->tried, set);
  vec_push(&s->passed, (char)ok);
  if (worst) *worst = w;
  return ok;
}

/* Sets of candidates are bit masks, so the search takes at most 64 layers
 * (the first that compute in 16 bits; docs/check.md says so). */

/* ddmin over the candidates (Zeller's delta debugging, complements only):
 * cut the set into n chunks, keep the first complement that still passes,
 * else cut finer; ends when no single layer can be dropped. */
static uint64_t minimize(search_state *s, uint64_t set) {
  int n = 2;
  for (;;) {
    int idx[64], size = 0;
    for (int k = 0; k < s->n_cand; k++)
      if (set >> k & 1) idx[size++] = k;
    if (size < 2 || s->st != CASTOR_OK) return set;
    if (n > size) n = size;
    bool reduced = false;
    for (int c = 0; c < n && !reduced; c++) {
      uint64_t chunk = 0;
      for (int j = size * c / n; j < size * (c + 1) / n; j++) chunk |= UINT64_C(1) << idx[j];
      if (trial(s, set & ~chunk, true, NULL)) set &= ~chunk, reduced = true;
    }
    if (reduced) n = n > 2 ? n - 1 : 2;
    else if (n >= size) return set;
    else n = 2 * n < size ? 2 * n : size;
  }
}

/* ---- the entry point ---- */

static double default_tolerance(const char *policy_name, castor_model *m) {
  (void)m;
  ir_policy p = IR_POLICY_FLOAT32;
  if (policy_name) ir_policy_from_name(policy_name, strlen(policy_name), &p);
  switch (ir_policy_compute_dtype(p)) {
  case DT_F16: return 8 * 0x1p-11;
  case DT_BF16: return 8 * 0x1p-8;
  case DT_F32:
  case DT_I32:
  case DT_I64:
  case DT_I1:
  case DT_COUNT: break;
  }
  return 8 * 0x1p-24;
}

castor_status chk_fail(castor_context *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  castor_context_begin(ctx);
  diag_verror_kind(castor_context_diag(ctx), DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, fmt, ap);
  va_end(ap);
  return castor_context_finish(ctx, CASTOR_ERR_INVALID_ARGUMENT);
}

/* Random float32 inputs, as castor run draws them. */
static castor_status random_inputs(castor_context *ctx, castor_program *p, const castor_check_options *o,
                                   castor_tensor **in) {
  rng r;
  rng_init(&r, o->seed);
  for (int i = 0; i < castor_program_num_inputs(p); i++) {
    castor_tensor_info info;
    castor_program_input_info(p, i, &info);
    int64_t dims[RT_MAX_RANK];
    for (int k = 0; k < info.rank; k++) dims[k] = info.dims[k] < 0 ? o->batch : info.dims[k];
    if (info.dtype != CASTOR_F32) return chk_fail(ctx, "input '%s' has dtype %s; random inputs are float32 only, pass inputs", info.name, castor_dtype_name(info.dtype));
    castor_status st = castor_tensor_create(ctx, info.dtype, info.rank, dims, &in[i]);
    if (st != CASTOR_OK) return st;
    float *x = castor_tensor_data(in[i]);
    for (int64_t k = 0; k < castor_tensor_numel(in[i]); k++) x[k] = rng_uniform_f32(&r, -1.0f, 1.0f);
  }
  return CASTOR_OK;
}

static castor_status search_fix(castor_check_report *r, search_state *s) {
  const char **names = xcalloc((size_t)r->test.n + 1, sizeof *names);
  int n = collect_layers(&r->test, names);
  s->cand = xcalloc((size_t)n + 1, sizeof *s->cand);
  for (int i = 0; i < n; i++) {
    castor_check_layer row;
    layer_row(r, names[i], &row);
    if ((row.dtype == CASTOR_F16 || row.dtype == CASTOR_BF16) && !list_has(s->o->compile.fp32_layers, names[i]) &&
        s->n_cand < 64)
      s->cand[s->n_cand++] = names[i];
  }
  free(names);
  uint64_t all = s->n_cand == 64 ? ~UINT64_C(0) : (UINT64_C(1) << s->n_cand) - 1;
  if (!s->n_cand || !trial(s, all, true, NULL)) {
    r->sum.verdict = CASTOR_CHECK_NO_FIX;
    return s->st;
  }
  uint64_t set = minimize(s, all);
  if (s->st != CASTOR_OK) return s->st;
  double worst = 0;
  if (!trial(s, set, false, &worst)) { /* the final run must agree with the search's */
    r->sum.verdict = CASTOR_CHECK_NO_FIX;
    return s->st;
  }
  char *list = set_string(s, set);
  r->sum.fp32_layers = arena_strdup(r->arena, list);
  free(list);
  r->sum.fixed_output_error = worst;
  r->sum.verdict = CASTOR_CHECK_FIX;
  return CASTOR_OK;
}

castor_status castor_check(castor_model *m, const castor_check_options *opts, castor_tensor *const *inputs,
                           int n_inputs, castor_check_report **out_report) {
  castor_context *ctx = castor_model_context(m);
  if (!ctx) return CASTOR_ERR_INVALID_ARGUMENT;
  castor_check_options defaults;
  if (!opts) castor_check_options_init(&defaults), opts = &defaults;
  if (!out_report) return chk_fail(ctx, "castor_check: NULL out_report");
  *out_report = NULL;
  if (!(opts->tolerance >= 0) || !isfinite(opts->tolerance))
    return chk_fail(ctx, "the tolerance must be a finite number >= 0 (0: the policy's default), got %g", opts->tolerance);
  if (opts->batch < 1) return chk_fail(ctx, "the batch must be positive, got %lld", (long long)opts->batch);
  if ((n_inputs && !inputs) || n_inputs < 0) return chk_fail(ctx, "castor_check: %d inputs in a NULL array", n_inputs);
  castor_compile_options ref_opts = opts->compile;
  ref_opts.policy = "float32";
  ref_opts.fp32_ops = ref_opts.fp32_layers = NULL;
  ref_opts.keep_16bit_outputs = 0;

  castor_check_report *r = xcalloc(1, sizeof *r);
  r->arena = arena_create();
  str_buf_init(&r->text);
  castor_program *pref = NULL, *ptest = NULL;
  castor_tensor **own_in = NULL, **want = NULL, **got = NULL;
  int n_in = 0, n_out = 0;
  search_state s;
  memset(&s, 0, sizeof s);
  castor_status st = castor_compile(m, &ref_opts, &pref);
  if (st != CASTOR_OK) goto done;
  n_in = castor_program_num_inputs(pref), n_out = castor_program_num_outputs(pref);
  if (!inputs) {
    own_in = xcalloc((size_t)n_in + 1, sizeof *own_in);
    if ((st = random_inputs(ctx, pref, opts, own_in)) != CASTOR_OK) goto done;
    inputs = own_in, n_inputs = n_in;
  }
  want = xcalloc((size_t)n_out + 1, sizeof *want);
  got = xcalloc((size_t)n_out + 1, sizeof *got);
  /* the plain reference run checks the inputs' count, dtypes and shapes */
  if ((st = castor_program_run(pref, inputs, n_inputs, want, n_out)) != CASTOR_OK) goto done;
  int64_t batch = opts->compile.batch > 0 ? opts->compile.batch : 1; /* a bound batch: static shapes */
  for (int i = 0; i < n_in; i++) {
    castor_tensor_info info;
    castor_program_input_info(pref, i, &info);
    if (info.rank && info.dims[0] < 0) batch = castor_tensor_dims(inputs[i])[0];
  }
  observe_req qr = {r, &r->ref, inputs, n_in, batch, false}, qt = {r, &r->test, inputs, n_in, batch, true};
  if ((st = castor_compile_to(m, &ref_opts, NULL, observe_fn, &qr)) != CASTOR_OK) goto done;
  if (opts->layers) { /* the result filter names layers of the model */
    const char **names = xcalloc((size_t)r->ref.n + 1, sizeof *names);
    int n = collect_layers(&r->ref, names);
    for (const char *p = opts->layers;;) {
      const char *e = strchr(p, ',');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      bool found = false;
      for (int k = 0; k < n && !found; k++) found = strlen(names[k]) == len && !strncmp(names[k], p, len);
      if (!found) {
        str_buf all;
        str_buf_init(&all);
        for (int k = 0; k < n; k++) str_buf_printf(&all, "%s%s", k ? ", " : "", names[k]);
        char *item = arena_strndup(r->arena, p, len);
        if (len) st = chk_fail(ctx, "--layers: the model has no layer '%s' (layers: %s)", item, str_buf_cstr(&all));
        else st = chk_fail(ctx, "--layers: empty item in '%s'", opts->layers);
        str_buf_fini(&all);
        break;
      }
      if (!e) break;
      p = e + 1;
    }
    free(names);
    if (st != CASTOR_OK) goto done;
  }
  if ((st = castor_compile(m, &opts->compile, &ptest)) != CASTOR_OK) goto done;
  if ((st = castor_program_run(ptest, inputs, n_inputs, got, n_out)) != CASTOR_OK) goto done;
  if ((st = castor_compile_to(m, &opts->compile, NULL, observe_fn, &qt)) != CASTOR_OK) goto done;
  r->sum.warnings = arena_strdup(r->arena, castor_context_last_warnings(ctx));

  ir_policy pol = r->test.dot->policy;
  double tol = opts->tolerance > 0 ? opts->tolerance : default_tolerance(ir_policy_name(pol), m);
  r->sum.model = arena_strdup(r->arena, r->test.dot->name);
  r->sum.policy = ir_policy_name(pol);
  r->sum.tolerance = tol;
  r->sum.batch = batch;
  compare_builds(r, tol);
  r->sum.first_bad = first_nonfinite(&r->test);
  r->sum.reference_first_bad = first_nonfinite(&r->ref);
  {
    const char **names = xcalloc((size_t)r->test.n + 1, sizeof *names);
    int n = collect_layers(&r->test, names);
    r->layers = xcalloc((size_t)n + 1, sizeof *r->layers);
    for (int i = 0; i < n; i++)
      if (!opts->layers || list_has(opts->layers, names[i])) layer_row(r, names[i], &r->layers[r->n_layers++]);
    free(names);
  }
  bool ref_finite = true;
  for (int o = 0; o < n_out; o++) {
    const castor_tensor *w = want[o];
    float *x = xmalloc((size_t)castor_tensor_numel(w) * sizeof *x + 1);
    widen((ir_dtype)castor_tensor_dtype(w), castor_tensor_data(want[o]), castor_tensor_numel(w), x);
    for (int64_t e = 0; e < castor_tensor_numel(w); e++) ref_finite = ref_finite && isfinite(x[e]);
    free(x);
  }
  bool ok = outputs_within(got, want, n_out, tol, &r->sum.output_error);
  if (!ref_finite) r->sum.verdict = CASTOR_CHECK_REFERENCE_NOT_FINITE;
  else if (ok) r->sum.verdict = CASTOR_CHECK_OK;
  else if (!opts->search) r->sum.verdict = CASTOR_CHECK_OFF;
  else {
    s = (search_state){.m = m, .o = opts, .in = inputs, .n_in = n_inputs, .want = want, .n_out = n_out, .tol = tol};
    st = search_fix(r, &s);
    r->sum.n_trials = s.n_trials;
  }
done:
  free(s.cand);
  vec_free(&s.tried);
  vec_free(&s.passed);
  for (int o = 0; o < n_out; o++) {
    if (want) castor_tensor_destroy(want[o]);
    if (got) castor_tensor_destroy(got[o]);
  }
  free(want), free(got);
  for (int i = 0; own_in && i < n_in; i++) castor_tensor_destroy(own_in[i]);
  free(own_in);
  castor_program_destroy(pref);
  castor_program_destroy(ptest);
  if (st != CASTOR_OK) {
    castor_check_report_destroy(r);
    return st; /* the failed call left its message in ctx */
  }
  *out_report = r;
  castor_context_begin(ctx); /* the build's warnings are in the report */
  return castor_context_finish(ctx, CASTOR_OK);
}

/* ---- accessors ---- */

void castor_check_report_summary(const castor_check_report *r, castor_check_summary *out) {
  if (!out) return;
  if (!r) {
    memset(out, 0, sizeof *out);
    return;
  }
  *out = r->sum;
}

int castor_check_report_num_layers(const castor_check_report *r) { return r ? r->n_layers : 0; }

castor_status castor_check_report_layer(const castor_check_report *r, int i, castor_check_layer *out) {
  if (!r || !out || i < 0 || i >= r->n_layers) return CASTOR_ERR_INVALID_ARGUMENT;
  *out = r->layers[i];
  return CASTOR_OK;
}

const char *castor_check_report_format(castor_check_report *r, castor_check_format f) {
  if (!r) return "";
  str_buf_clear(&r->text);
  switch (f) {
  case CASTOR_CHECK_TEXT: r->sum.train ? chk_format_train_text(r, &r->text) : chk_format_text(r, &r->text); break;
  case CASTOR_CHECK_JSON: r->sum.train ? chk_format_train_json(r, &r->text) : chk_format_json(r, &r->text); break;
  case CASTOR_CHECK_DOT:
    if (!r->sum.train) chk_format_dot(r, &r->text);
    break;
  }
  return str_buf_cstr(&r->text);
}
