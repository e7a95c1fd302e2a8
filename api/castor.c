/* SPDX-License-Identifier: Apache-2.0 */
/*
 * castor.c: the public API (include/castor.h) over the layers: frontend ->
 * passes -> codegen -> runtime. Every entry point clears the context's
 * diagnostics, does its work, and on failure keeps the rendered diagnostics
 * as the context's last error. API misuse is reported, never asserted.
 */
#include "castor.h"

#include <llvm-c/Core.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/internal.h"
#include "codegen/cg_backend.h"
#include "formats/npy.h"
#include "formats/safetensors.h"
#include "formats/onnx.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/lr_schedule.h"

_Static_assert((int)CASTOR_F32 == (int)DT_F32 && (int)CASTOR_F16 == (int)DT_F16 &&
                   (int)CASTOR_BF16 == (int)DT_BF16 && (int)CASTOR_I32 == (int)DT_I32 &&
                   (int)CASTOR_I64 == (int)DT_I64 && (int)CASTOR_BOOL == (int)DT_I1,
               "castor_dtype and ir_dtype must agree");
_Static_assert((int)CASTOR_STATE_TRAINABLE == (int)RT_STATE_TRAINABLE &&
                   (int)CASTOR_STATE_NONTRAINABLE == (int)RT_STATE_NONTRAINABLE &&
                   (int)CASTOR_STATE_SLOT == (int)RT_STATE_SLOT && (int)CASTOR_STATE_SCALAR == (int)RT_STATE_SCALAR,
               "castor_state_kind and rt_state_kind must agree");
_Static_assert(CASTOR_MAX_RANK == TENSOR_MAX_RANK, "castor.h's CASTOR_MAX_RANK is util/dtype.h's TENSOR_MAX_RANK");
_Static_assert((int)SAFETENSORS_MAX_RANK == (int)IR_MAX_RANK &&
                   (int)NPY_MAX_RANK == (int)RT_MAX_RANK && (int)IR_MAX_RANK == (int)RT_MAX_RANK,
               "the formats, the IR and the runtime must agree on the largest rank");

struct castor_context {
  diag_sink *diag;
  str_buf last_error, last_warnings;
};

struct castor_model {
  castor_context *ctx;
  ir_graph *graph; /* as lowered by the frontend; compile works on a copy */
  fe_train_defaults defaults; /* how the model says it trains (frontend.h) */
  fe_keras_source *keras;     /* a .keras model: what writing it back needs; else NULL */
  str_buf dump;               /* castor_model_dump_text's last text (zeroed: empty) */
};

struct castor_program {
  castor_context *ctx;
  cg_exec *x;           /* the compiled program on its backend */
  const rt_program *rt; /* x->desc: inputs, outputs, buffers */
  /* A training step's model weights that are not its states (their layer's
   * output reaches no output, so no pass kept them): saved as loaded, so
   * that castor_program_save_weights writes every weight the model has.
   * Names and data owned. */
  safetensors_tensor *untrained;
  int n_untrained;
  /* training options: a learning-rate schedule, applied before each run
   * at state iter_state (optimizer.iterations) into lr_state; NULL: none */
  rt_lr_schedule *schedule;
  int lr_state, iter_state;
  hmap state_names; /* state name -> its index + 1: a lookup by name is O(1), not a scan (deep models) */
};

struct castor_tensor {
  castor_context *ctx;
  castor_dtype dtype;
  int rank;
  int64_t dims[RT_MAX_RANK];
  int64_t numel;
  size_t nbytes;
  void *data;
  bool borrowed; /* castor_tensor_wrap: data is the caller's, never freed here */
};

const char *castor_status_string(castor_status s) {
  switch (s) {
  case CASTOR_OK: return "CASTOR_OK: success";
  case CASTOR_ERR_INVALID_ARGUMENT: return "CASTOR_ERR_INVALID_ARGUMENT: invalid argument";
  case CASTOR_ERR_PARSE: return "CASTOR_ERR_PARSE: malformed model or weights";
  case CASTOR_ERR_IO: return "CASTOR_ERR_IO: input/output error";
  case CASTOR_ERR_UNSUPPORTED: return "CASTOR_ERR_UNSUPPORTED: not supported";
  case CASTOR_ERR_CODEGEN: return "CASTOR_ERR_CODEGEN: code generation failed";
  case CASTOR_ERR_DEVICE: return "CASTOR_ERR_DEVICE: device error";
  case CASTOR_ERR_NOMEM: return "CASTOR_ERR_NOMEM: out of memory";
  case CASTOR_ERR_INTERNAL: return "CASTOR_ERR_INTERNAL: internal error";
  }
  return "unknown castor_status";
}

const char *castor_version(void) {
  static char buf[64];
  if (!buf[0]) {
    unsigned major, minor, patch;
    LLVMGetVersion(&major, &minor, &patch);
    snprintf(buf, sizeof buf, "%s (LLVM %u.%u.%u)", CASTOR_VERSION_STRING, major, minor, patch);
  }
  return buf;
}

const char *castor_dtype_name(castor_dtype t) {
  return (unsigned)t < DT_COUNT ? dtype_name((ir_dtype)t) : "?";
}
size_t castor_dtype_size(castor_dtype t) {
  return (unsigned)t < DT_COUNT ? (size_t)dtype_size((ir_dtype)t) : 0;
}

/* ---- context and error plumbing ---- */

castor_status castor_context_create(castor_context **out_ctx) {
  if (!out_ctx) return CASTOR_ERR_INVALID_ARGUMENT;
  castor_context *c = xcalloc(1, sizeof *c);
  c->diag = diag_sink_create();
  str_buf_init(&c->last_error);
  str_buf_init(&c->last_warnings);
  *out_ctx = c;
  return CASTOR_OK;
}

void castor_context_destroy(castor_context *ctx) {
  if (!ctx) return;
  diag_sink_destroy(ctx->diag);
  str_buf_fini(&ctx->last_error);
  str_buf_fini(&ctx->last_warnings);
  free(ctx);
}

const char *castor_context_last_error(const castor_context *ctx) {
  return ctx ? str_buf_cstr((str_buf *)&ctx->last_error) : "castor: NULL context";
}
const char *castor_context_last_warnings(const castor_context *ctx) {
  return ctx ? str_buf_cstr((str_buf *)&ctx->last_warnings) : "";
}

static void begin(castor_context *ctx) {
  diag_clear(ctx->diag);
  str_buf_clear(&ctx->last_error);
  str_buf_clear(&ctx->last_warnings);
}

/* Ends an API call: keeps the diagnostics as the last error or warnings. */
static castor_status finish(castor_context *ctx, castor_status st) {
  if (st != CASTOR_OK) {
    const char *t = diag_text(ctx->diag);
    str_buf_puts(&ctx->last_error, *t ? t : castor_status_string(st));
  } else if (diag_warning_count(ctx->diag)) {
    str_buf_puts(&ctx->last_warnings, diag_text(ctx->diag));
  }
  return st;
}

static castor_status fail(castor_context *ctx, castor_status st, const char *fmt, ...)
    CASTOR_PRINTF(3, 4);
static castor_status fail(castor_context *ctx, castor_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(ctx->diag, DIAG_ERROR, (diag_loc){0}, fmt, ap);
  va_end(ap);
  return finish(ctx, st);
}

castor_status castor_status_from_diag(const diag_sink *d, castor_status fallback) {
  switch (diag_first_error_kind(d)) {
  case DIAG_KIND_NONE:
  case DIAG_KIND_UNSPECIFIED: return fallback;
  case DIAG_KIND_IO: return CASTOR_ERR_IO;
  case DIAG_KIND_INVALID_ARGUMENT: return CASTOR_ERR_INVALID_ARGUMENT;
  case DIAG_KIND_INVALID_MODEL: return CASTOR_ERR_PARSE;
  case DIAG_KIND_UNSUPPORTED: return CASTOR_ERR_UNSUPPORTED;
  case DIAG_KIND_CODEGEN: return CASTOR_ERR_CODEGEN;
  case DIAG_KIND_DEVICE: return CASTOR_ERR_DEVICE;
  case DIAG_KIND_INTERNAL: return CASTOR_ERR_INTERNAL;
  }
  return fallback;
}

/* ---- models ---- */

void castor_load_options_init(castor_load_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

static castor_status load(castor_context *ctx, const char *name, const char *text, size_t len,
                          const char *path, const castor_load_options *opts, castor_model **out) {
  fe_options fo;
  fe_options_init(&fo);
  if (opts) fo.seed = opts->seed, fo.weights_path = opts->weights_path;
  if (opts && opts->batch < 0)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_load_options: batch must be >= 1 (0: the batch N stays "
                "symbolic), got %lld", (long long)opts->batch);
  if (opts && opts->n_dims > 0) {
    if (!opts->dim_names || !opts->dim_values)
      return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_load_options: n_dims is %d but dim_names or dim_values is NULL", opts->n_dims);
    for (int i = 0; i < opts->n_dims; i++) {
      if (!opts->dim_names[i] || !*opts->dim_names[i])
        return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_load_options: dimension %d has no name", i);
      if (opts->dim_values[i] < 1 || opts->dim_values[i] > (INT64_C(1) << 40))
        return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_load_options: dimension '%s' must be bound to 1..2^40, got %lld",
                    opts->dim_names[i], (long long)opts->dim_values[i]);
      for (int j = 0; j < i; j++)
        if (!strcmp(opts->dim_names[i], opts->dim_names[j]))
          return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_load_options: dimension '%s' is bound twice", opts->dim_names[i]);
    }
    fo.dim_names = opts->dim_names, fo.dim_values = opts->dim_values, fo.n_dims = opts->n_dims;
  }
  if (opts) fo.batch = opts->batch;
  fe_binding *binds = NULL;
  onnx_tensor *bound = NULL;
  if (opts && opts->n_binds > 0) {
    if (!opts->bind_names || !opts->bind_tensors)
      return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_load_options: n_binds is %d but bind_names or bind_tensors is NULL", opts->n_binds);
    binds = xcalloc((size_t)opts->n_binds, sizeof *binds);
    bound = xcalloc((size_t)opts->n_binds, sizeof *bound);
    for (int i = 0; i < opts->n_binds; i++) {
      const castor_tensor *t = opts->bind_tensors[i];
      if (!opts->bind_names[i] || !t) {
        free(binds), free(bound);
        return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_load_options: binding %d has a NULL name or tensor", i);
      }
      static const int onnx_of[] = {[CASTOR_F32] = ONNX_FLOAT, [CASTOR_F16] = ONNX_FLOAT16, [CASTOR_BF16] = ONNX_BFLOAT16,
                                    [CASTOR_I32] = ONNX_INT32, [CASTOR_I64] = ONNX_INT64, [CASTOR_BOOL] = ONNX_BOOL};
      onnx_tensor *o = &bound[i];
      *o = (onnx_tensor){.name = opts->bind_names[i], .dtype = onnx_of[castor_tensor_dtype(t)], .rank = castor_tensor_rank(t),
                         .numel = castor_tensor_numel(t), .data = castor_tensor_data((castor_tensor *)t),
                         .nbytes = castor_tensor_nbytes(t)};
      for (int r = 0; r < o->rank; r++) o->dims[r] = castor_tensor_dims(t)[r];
      binds[i] = (fe_binding){.name = opts->bind_names[i], .tensor = o, .where_needed = opts->bind_where_needed != 0};
    }
    fo.bindings = binds, fo.n_bindings = opts->n_binds;
  }
  fe_train_defaults td;
  fe_keras_source *keras = NULL;
  fo.keras_source = &keras;
  ir_graph *g = path ? fe_load(path, &fo, ctx->diag, &td)
                     : fe_load_mem(name, text, len, &fo, ctx->diag, &td);
  free(binds);
  free(bound);
  if (!g) {
    fe_keras_source_destroy(keras);
    return finish(ctx, castor_status_from_diag(ctx->diag, CASTOR_ERR_PARSE));
  }
  castor_model *m = xcalloc(1, sizeof *m);
  m->ctx = ctx;
  m->graph = g;
  m->defaults = td;
  m->keras = keras;
  *out = m;
  return finish(ctx, CASTOR_OK);
}

castor_status castor_model_load_file(castor_context *ctx, const char *path,
                                     const castor_load_options *opts, castor_model **out_model) {
  if (!ctx) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(ctx);
  if (!path || !out_model) return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_model_load_file: NULL argument");
  *out_model = NULL;
  return load(ctx, NULL, NULL, 0, path, opts, out_model);
}

castor_status castor_model_load_string(castor_context *ctx, const char *name, const char *text,
                                       size_t len, const castor_load_options *opts,
                                       castor_model **out_model) {
  if (!ctx) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(ctx);
  if (!text || !out_model) return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_model_load_string: NULL argument");
  *out_model = NULL;
  return load(ctx, name ? name : "<string>", text, len, NULL, opts, out_model);
}

void castor_model_destroy(castor_model *m) {
  if (!m) return;
  ir_graph_destroy(m->graph);
  fe_keras_source_destroy(m->keras);
  str_buf_fini(&m->dump);
  free(m);
}

/* ---- compile ---- */

void castor_compile_options_init(castor_compile_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->target = CASTOR_TARGET_CPU;
  o->opt_level = 2;
  o->device = -1;
}

void castor_driver_options_init(castor_driver_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

void castor_train_options_init(castor_train_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

static void shape_str(str_buf *b, castor_dtype dt, int rank, const int64_t *dims);

/* A Keras file's other optimizer arguments (frontend.h), under the
 * caller's: each group the caller set (a schedule or a constant rate, a
 * clip, ...) replaces the file's whole group. */
static void keras_train_defaults(const fe_train_defaults *d, const castor_train_options *caller,
                                 castor_train_options *t) {
  if (!t->beta_1) t->beta_1 = d->beta_1;
  if (!t->beta_2) t->beta_2 = d->beta_2;
  if (!t->epsilon) t->epsilon = d->epsilon;
  if (!t->weight_decay) t->weight_decay = d->weight_decay;
  if (!t->loss_scale_initial) t->loss_scale_initial = d->loss_scale_initial;
  if (!t->loss_scale_growth_steps) t->loss_scale_growth_steps = d->loss_scale_growth_steps;
  if (!caller->clipnorm && !caller->clipvalue && !caller->global_clipnorm)
    t->clipnorm = d->clipnorm, t->clipvalue = d->clipvalue, t->global_clipnorm = d->global_clipnorm;
  if (!caller->lr_schedule && !caller->learning_rate && d->lr_schedule[0]) {
    t->lr_schedule = d->lr_schedule;
    t->learning_rate = d->learning_rate;
    t->decay_steps = d->decay_steps, t->decay_rate = d->decay_rate, t->staircase = d->staircase;
    t->alpha = d->alpha, t->warmup_target = d->warmup_target, t->warmup_steps = d->warmup_steps;
    t->boundaries = d->n_boundaries ? d->boundaries : NULL, t->n_boundaries = d->n_boundaries;
    t->values = d->n_values ? d->values : NULL, t->n_values = d->n_values;
  }
}

void castor_model_train_options(const castor_model *m, castor_train_options *o) {
  castor_train_options_init(o);
  if (!m) return;
  o->loss = m->defaults.loss[0] ? m->defaults.loss : NULL;
  o->optimizer = m->defaults.optimizer[0] ? m->defaults.optimizer : NULL;
  o->from_logits = m->defaults.from_logits;
  o->learning_rate = m->defaults.learning_rate;
  o->momentum = m->defaults.momentum;
  o->nesterov = m->defaults.nesterov;
  o->centered = m->defaults.centered;
  o->loss_scale = m->defaults.loss_scale[0] ? m->defaults.loss_scale : NULL;
  castor_train_options none;
  castor_train_options_init(&none);
  keras_train_defaults(&m->defaults, &none, o);
}

/* The public training options as the grad pass's (passes.h). */
static bool train_options(const castor_train_options *t, bool loss_only, bool gradients, pass_train_options *o,
                          diag_sink *d) {
  pass_train_options_init(o);
  char num[64];
  if (t->loss && !pass_train_option(o, "loss", t->loss, d)) return false;
  if (!gradients && t->optimizer && (!pass_train_option(o, "optimizer", t->optimizer, d) || o->optimizer == PASS_OPT_NONE)) {
    if (o->optimizer == PASS_OPT_NONE)
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "optimizer 'none' has no training step (castor dump shows it)");
    return false;
  }
  if (t->loss_scale && !pass_train_option(o, "loss-scale", t->loss_scale, d)) return false;
  const struct { const char *key; double v; } nums[] = {
      {"learning-rate", t->learning_rate}, {"momentum", t->momentum}, {"loss-scale-min", t->loss_scale_min}};
  for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
    if (nums[i].v == 0) continue;
    snprintf(num, sizeof num, "%.17g", nums[i].v);
    if (!pass_train_option(o, nums[i].key, num, d)) return false;
  }
  if (!castor_train_opts_apply(t, o, d)) return false; /* training options (api/train_opts.c) */
  o->from_logits = o->from_logits || t->from_logits != 0;
  o->nesterov = t->nesterov != 0;
  o->centered = t->centered != 0;
  o->loss_only = loss_only;
  if (gradients) o->optimizer = PASS_OPT_NONE; /* the gradients as outputs, no update */
  return true;
}

/* The one compile driver: castor_compile, castor_compile_to and the CLI's
 * dump and build map options to the pipeline here, so what `castor dump`
 * shows is what `castor run` compiles. The backend (cg_backend.h) decides
 * everything target-specific. */
static int state_index(const castor_program *p, const char *name);

/* The model's weights that the step program has no state for (see
 * castor_program.untrained), copied from the model's graph. */
static void keep_untrained(castor_program *p, const ir_graph *model) {
  for (int i = 0; i < model->n_nodes; i++) {
    const ir_node *n = model->nodes[i];
    int64_t numel = 0;
    if (n->op != IR_OP_CONST || !n->attr.weight || !n->attr.data || state_index(p, n->attr.weight) >= 0 ||
        (n->type.dtype != DT_F32 && n->type.dtype != DT_F16 && n->type.dtype != DT_BF16) ||
        !ir_type_numel(&n->type, 1, &numel))
      continue;
    size_t bytes = (size_t)numel * (size_t)dtype_size(n->type.dtype);
    void *data = xmalloc(bytes ? bytes : 1);
    memcpy(data, n->attr.data, bytes);
    p->untrained = xrealloc(p->untrained, (size_t)(p->n_untrained + 1) * sizeof *p->untrained);
    safetensors_tensor *t = &p->untrained[p->n_untrained++];
    *t = (safetensors_tensor){.name = xstrdup(n->attr.weight), .dtype = n->type.dtype, .rank = n->type.rank, .data = data};
    for (int r = 0; r < n->type.rank; r++) t->dims[r] = n->type.dims[r];
  }
}

/* Keras in: a training program of a .keras model resumes with the
 * optimizer's variables the file holds (iterations, slots, the loss
 * scale; the learning rate unless the caller set one), as Keras's model.fit
 * after load_model does, when it trains with the optimizer compile_config
 * names (docs/keras.md, "Resuming training"). */
static bool keras_resume(castor_program *p, const castor_model *m, const castor_train_options *to,
                         const castor_train_options *caller) {
  const char *opt = to->optimizer ? to->optimizer : "rmsprop";
  if (!m->defaults.optimizer[0] || strcmp(opt, m->defaults.optimizer) != 0) return true; /* another optimizer: fresh */
  int n = p->rt->n_states, n_loaded = 0;
  fe_keras_state *st = xcalloc((size_t)n + 1, sizeof *st);
  bool *loaded = xcalloc((size_t)n + 1, sizeof *loaded);
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    const rt_tensor_desc *t = &p->rt->states[i].t;
    void *data = xmalloc((size_t)rt_state_bytes(p->rt, i) + 1);
    st[i] = (fe_keras_state){t->name, t->dtype, t->rank, t->dims, data, p->rt->states[i].kind == RT_STATE_TRAINABLE};
    ok = cg_exec_state_read(p->x, i, data, p->ctx->diag);
  }
  ok = ok && fe_keras_load_optimizer(m->keras, st, n, opt, to->lr_schedule != NULL, caller->learning_rate != 0,
                                     loaded, &n_loaded, p->ctx->diag);
  for (int i = 0; i < n && ok; i++)
    if (loaded[i]) ok = cg_exec_state_write(p->x, i, st[i].data, p->ctx->diag);
  for (int i = 0; i < n; i++) free((void *)st[i].data);
  free(st), free(loaded);
  return ok;
}

static castor_status compile(castor_model *m, const castor_compile_options *opts, const castor_driver_options *dopts,
                             castor_codegen_fn fn, void *fn_arg, castor_program **out_program) {
  if (!m) return CASTOR_ERR_INVALID_ARGUMENT;
  castor_context *ctx = m->ctx;
  begin(ctx);
  if (!out_program && !fn) return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_compile: NULL out_program");
  if (out_program) *out_program = NULL;
  castor_compile_options defaults;
  if (!opts) castor_compile_options_init(&defaults), opts = &defaults;
  castor_driver_options no_driver;
  if (!dopts) castor_driver_options_init(&no_driver), dopts = &no_driver;
  const cg_backend *be = castor_target_backend(opts->target);
  if (!be)
    return fail(ctx, CASTOR_ERR_UNSUPPORTED, "target %d is not supported by this build (targets: %s)",
                (int)opts->target, cg_backend_names());
  if (opts->opt_level < 0 || opts->opt_level > 3)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "opt_level must be 0-3, got %d", opts->opt_level);
  if (opts->threads < 0)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "threads must be >= 0 (0: all CPUs), got %d", opts->threads);
  if (opts->batch < 0)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "batch must be >= 1 (0: the batch N stays symbolic), got %lld",
                (long long)opts->batch);
  if (m->graph->n_nodes > IR_MAX_NODES) {
    diag_error_kind(ctx->diag, DIAG_KIND_UNSUPPORTED, m->graph->nodes[IR_MAX_NODES]->loc,
                    "the model's graph has %d nodes, more than the %d castor compiles (IR_MAX_NODES); "
                    "this layer is past the limit", m->graph->n_nodes, IR_MAX_NODES);
    return finish(ctx, CASTOR_ERR_UNSUPPORTED);
  }
  bool pad8 = be->always_pad8 || opts->pad8;
  const char *pipeline = dopts->passes ? dopts->passes
                         : dopts->train ? (pad8 ? PASS_PIPELINE_TRAIN_PAD8 : PASS_PIPELINE_TRAIN)
                         : pad8         ? PASS_PIPELINE_PAD8
                                        : PASS_PIPELINE_DEFAULT;
  if (!pass_pipeline_check(pipeline, ctx->diag)) return finish(ctx, castor_status_from_diag(ctx->diag, CASTOR_ERR_INVALID_ARGUMENT));
  ir_graph *g = ir_graph_clone(m->graph);
  if (opts->policy) {
    ir_policy p;
    if (!ir_policy_from_name(opts->policy, strlen(opts->policy), &p)) {
      ir_graph_destroy(g);
      return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT,
                  "unknown policy '%s' (float32, float16, bfloat16, mixed_float16, mixed_bfloat16)",
                  opts->policy);
    }
    g->policy = p;
  }
  char bind_err[256];
  if (opts->batch > 0 && !ir_graph_bind_batch(g, opts->batch, bind_err, sizeof bind_err)) {
    ir_graph_destroy(g);
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "batch %lld: %s", (long long)opts->batch, bind_err);
  }
  castor_status st = CASTOR_OK;
  pass_options po;
  pass_options_init(&po);
  po.verify_each = opts->verify_each != 0 || dopts->verify_each;
  po.autocast.fp32_ops = opts->fp32_ops;
  po.autocast.fp32_layers = opts->fp32_layers;
  po.autocast.keep_16bit_outputs = opts->keep_16bit_outputs != 0;
  po.dump_after = dopts->dump_after;
  po.dump_dir = dopts->dump_dir;
  po.dump_out = dopts->dump_out;
  castor_train_options topts; /* the caller's, over the model's training defaults */
  if (dopts->train && m->defaults.masked_output[0]) {
    ir_graph_destroy(g);
    return fail(ctx, CASTOR_ERR_UNSUPPORTED, "%s: training it is not supported (Keras weights the loss by the "
                "mask; castor's loss does not: end the model with return_sequences=false, or a layer that "
                "drops the mask)", m->defaults.masked_output);
  }
  if (dopts->train) {
    topts = *dopts->train;
    if (!topts.loss && m->defaults.loss[0]) topts.loss = m->defaults.loss;
    if (!topts.optimizer && m->defaults.optimizer[0]) topts.optimizer = m->defaults.optimizer;
    if (!topts.loss && !dopts->train->from_logits) topts.from_logits = m->defaults.from_logits;
    /* a Keras file's optimizer hyperparameters, for the optimizer it names */
    if (!dopts->train->optimizer && m->defaults.optimizer[0]) {
      if (topts.learning_rate == 0) topts.learning_rate = m->defaults.learning_rate;
      if (topts.momentum == 0) topts.momentum = m->defaults.momentum;
      if (!topts.nesterov) topts.nesterov = m->defaults.nesterov;
      if (!topts.centered) topts.centered = m->defaults.centered;
      keras_train_defaults(&m->defaults, dopts->train, &topts);
    }
    if (!topts.loss_scale && m->defaults.loss_scale[0]) topts.loss_scale = m->defaults.loss_scale;
  }
  if (dopts->train && !train_options(&topts, dopts->loss_only, dopts->gradients, &po.train, ctx->diag)) st = CASTOR_ERR_INVALID_ARGUMENT;
  else if (!pass_autocast_options_check(&po.autocast, ctx->diag)) st = CASTOR_ERR_INVALID_ARGUMENT;
  else if (!pass_run_pipeline(g, pipeline, &po, ctx->diag))
    st = castor_status_from_diag(ctx->diag, CASTOR_ERR_INTERNAL);
  cg_exec *x = NULL;
  if (st == CASTOR_OK) {
    cg_backend_options bo;
    cg_backend_options_init(&bo);
    bo.cg.opt_level = opts->opt_level;
    bo.cg.cpu = opts->cpu;
    bo.threads = opts->threads;
    bo.device = opts->device;
    bo.sm = opts->sm;
    if (fn) st = fn(g, be, &bo, fn_arg, ctx->diag);
    else if (!(x = cg_backend_compile(be, g, &bo, ctx->diag)))
      st = castor_status_from_diag(ctx->diag, CASTOR_ERR_CODEGEN);
  }
  ir_graph_destroy(g);
  if (st != CASTOR_OK || fn) return finish(ctx, st);
  castor_program *p = xcalloc(1, sizeof *p);
  p->ctx = ctx;
  p->x = x;
  p->rt = x->desc;
  hmap_init(&p->state_names, HMAP_STRINGS);
  for (intptr_t i = 0; i < p->rt->n_states; i++)
    hmap_put_str(&p->state_names, p->rt->states[i].t.name, strlen(p->rt->states[i].t.name), (void *)(i + 1));
  if (dopts->train && !dopts->loss_only && !dopts->gradients) keep_untrained(p, m->graph);
  if (dopts->train && !dopts->loss_only && !dopts->gradients && topts.lr_schedule) { /* training options */
    p->schedule = xcalloc(1, sizeof *p->schedule);
    castor_train_opts_schedule(&topts, po.train.optimizer == PASS_OPT_SGD ? 0.01 : 0.001, p->schedule);
    p->lr_state = state_index(p, "optimizer.learning_rate");
    p->iter_state = state_index(p, "optimizer.iterations");
    CASTOR_ASSERT(p->lr_state >= 0 && p->iter_state >= 0);
  }
  if (dopts->train && !dopts->loss_only && !dopts->gradients && m->keras && !keras_resume(p, m, &topts, dopts->train)) {
    castor_program_destroy(p);
    return finish(ctx, castor_status_from_diag(ctx->diag, CASTOR_ERR_PARSE));
  }
  *out_program = p;
  return finish(ctx, CASTOR_OK);
}

typedef struct dump_req {
  castor_emit what;
  str_buf *out;
  const ir_graph *model; /* the frontend's graph (the summary's layers) */
} dump_req;

static castor_status dump_fn(const ir_graph *g, const cg_backend *be, const cg_backend_options *bo, void *arg,
                             diag_sink *d) {
  const dump_req *r = arg;
  switch (r->what) {
  case CASTOR_EMIT_IR: ir_print(g, r->out); return CASTOR_OK;
  case CASTOR_EMIT_CASTS: pass_cast_report(g, r->out); return CASTOR_OK;
  case CASTOR_EMIT_DOT: ir_print_dot(g, NULL, NULL, r->out); return CASTOR_OK;
  case CASTOR_EMIT_SUMMARY: castor_summary_print(r->model, g, r->out); return CASTOR_OK;
  case CASTOR_EMIT_LLVM:
  case CASTOR_EMIT_PTX:
    if (!cg_backend_check(be, g, d) || !be->emit(g, bo, r->what == CASTOR_EMIT_PTX ? CG_EMIT_PTX : CG_EMIT_LLVM, r->out, d))
      return castor_status_from_diag(d, CASTOR_ERR_CODEGEN);
    return CASTOR_OK;
  }
  return CASTOR_ERR_INVALID_ARGUMENT;
}

castor_status castor_model_dump(castor_model *m, const castor_compile_options *opts,
                                const castor_driver_options *dopts, castor_emit what, str_buf *out) {
  dump_req r = {what, out, m ? m->graph : NULL};
  return castor_compile_to(m, opts, dopts, dump_fn, &r);
}

castor_status castor_model_dump_text(castor_model *m, const castor_compile_options *opts, castor_dump_kind kind,
                                     const char **out_text) {
  static const castor_emit emits[] = {
      [CASTOR_DUMP_IR] = CASTOR_EMIT_IR,     [CASTOR_DUMP_CASTS] = CASTOR_EMIT_CASTS,
      [CASTOR_DUMP_LLVM] = CASTOR_EMIT_LLVM, [CASTOR_DUMP_PTX] = CASTOR_EMIT_PTX,
      [CASTOR_DUMP_DOT] = CASTOR_EMIT_DOT,   [CASTOR_DUMP_SUMMARY] = CASTOR_EMIT_SUMMARY,
  };
  if (!m) return CASTOR_ERR_INVALID_ARGUMENT;
  if (out_text) *out_text = NULL;
  if (!out_text || (unsigned)kind >= sizeof emits / sizeof *emits) {
    begin(m->ctx);
    return fail(m->ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_model_dump_text: %s",
                out_text ? "unknown castor_dump_kind" : "out_text is NULL");
  }
  str_buf_clear(&m->dump);
  castor_compile_options o;
  castor_compile_options_init(&o);
  castor_status st = castor_model_dump(m, opts ? opts : &o, NULL, emits[kind], &m->dump);
  if (st == CASTOR_OK) *out_text = str_buf_cstr(&m->dump);
  return st;
}

void castor_tensor_summary(const castor_tensor *t, const char *name, str_buf *out) {
  rt_tensor_summary(out, name, (rt_dtype)t->dtype, t->rank, t->dims, t->data);
}

bool castor_tensor_nonfinite(const castor_tensor *t, str_buf *out) {
  int64_t counts[3];
  if (!rt_tensor_nonfinite((rt_dtype)t->dtype, t->rank, t->dims, t->data, counts)) return false;
  rt_nonfinite_str(out, counts);
  return true;
}

castor_status castor_compile(castor_model *m, const castor_compile_options *opts,
                             castor_program **out_program) {
  return compile(m, opts, NULL, NULL, NULL, out_program);
}

castor_status castor_compile_driver(castor_model *m, const castor_compile_options *opts,
                                    const castor_driver_options *dopts, castor_program **out_program) {
  return compile(m, opts, dopts, NULL, NULL, out_program);
}

castor_status castor_compile_train(castor_model *m, const castor_compile_options *opts,
                                   const castor_train_options *topts, castor_program **out_program) {
  castor_train_options defaults;
  if (!topts) castor_train_options_init(&defaults), topts = &defaults;
  castor_driver_options d;
  castor_driver_options_init(&d);
  d.train = topts;
  return compile(m, opts, &d, NULL, NULL, out_program);
}

castor_status castor_compile_eval(castor_model *m, const castor_compile_options *opts,
                                  const castor_train_options *topts, castor_program **out_program) {
  castor_train_options defaults;
  if (!topts) castor_train_options_init(&defaults), topts = &defaults;
  castor_driver_options d;
  castor_driver_options_init(&d);
  d.train = topts;
  d.loss_only = true;
  return compile(m, opts, &d, NULL, NULL, out_program);
}

int castor_program_num_states(const castor_program *p) { return p ? p->rt->n_states : 0; }

static int state_index(const castor_program *p, const char *name) {
  return name ? (int)((intptr_t)hmap_get_str(&p->state_names, name, strlen(name)) - 1) : -1;
}

/* A model weight (trainable or not), which save and copy take; not an
 * optimizer slot or training scalar. */
static bool is_model_weight(const castor_program *p, int i) {
  rt_state_kind k = p->rt->states[i].kind;
  return k == RT_STATE_TRAINABLE || k == RT_STATE_NONTRAINABLE;
}

castor_state_kind castor_program_state_kind(const castor_program *p, int i) {
  if (!p || i < 0 || i >= p->rt->n_states) return CASTOR_STATE_INVALID;
  return (castor_state_kind)p->rt->states[i].kind;
}

castor_status castor_program_copy_weights(castor_program *dst, const castor_program *src) {
  if (!dst || !src) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(dst->ctx);
  void *buf = NULL;
  castor_status st = CASTOR_OK;
  for (int i = 0; i < src->rt->n_states && st == CASTOR_OK; i++) {
    if (!is_model_weight(src, i)) continue;
    const rt_state_desc *s = &src->rt->states[i];
    int j = state_index(dst, s->t.name);
    if (j < 0 || dst->rt->states[j].t.dtype != s->t.dtype || rt_state_bytes(dst->rt, j) != rt_state_bytes(src->rt, i)) {
      st = fail(dst->ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s has no weight %s of %s's dtype and shape", dst->rt->name,
                s->t.name, src->rt->name);
      break;
    }
    free(buf);
    buf = xmalloc((size_t)rt_state_bytes(src->rt, i) + 1);
    if (!cg_exec_state_read(src->x, i, buf, dst->ctx->diag) || !cg_exec_state_write(dst->x, j, buf, dst->ctx->diag))
      st = finish(dst->ctx, castor_status_from_diag(dst->ctx->diag, CASTOR_ERR_DEVICE));
  }
  free(buf);
  return st;
}

castor_status castor_program_save_weights(castor_program *p, const char *path) {
  if (!p || !path) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(p->ctx);
  if (p->rt->n_states == 0)
    return fail(p->ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s is not a training program: it has no weights to save", p->rt->name);
  safetensors_tensor *t = xcalloc((size_t)p->rt->n_states + (size_t)p->n_untrained, sizeof *t);
  int n = 0;
  bool ok = true;
  for (int i = 0; i < p->rt->n_states && ok; i++) { /* each weight copied out of the backend */
    if (!is_model_weight(p, i)) continue;
    const rt_tensor_desc *d = &p->rt->states[i].t;
    void *data = xmalloc((size_t)rt_state_bytes(p->rt, i) + 1);
    t[n] = (safetensors_tensor){.name = d->name, .dtype = d->dtype, .rank = d->rank, .data = data};
    for (int r = 0; r < d->rank; r++) t[n].dims[r] = d->dims[r];
    n++;
    ok = cg_exec_state_read(p->x, i, data, p->ctx->diag);
  }
  int n_copied = n; /* the copies above are ours to free; the untrained weights are the model's */
  for (int i = 0; i < p->n_untrained; i++) t[n++] = p->untrained[i]; /* every weight of the model */
  ok = ok && safetensors_write(path, t, n, NULL, 0, p->ctx->diag);
  for (int i = 0; i < n_copied; i++) free((void *)t[i].data);
  free(t);
  return ok ? CASTOR_OK : finish(p->ctx, castor_status_from_diag(p->ctx->diag, CASTOR_ERR_IO));
}

const char *castor_model_loss(const castor_model *m) {
  return m && m->defaults.loss[0] ? m->defaults.loss : NULL;
}

bool castor_model_is_keras(const castor_model *m) { return m && m->keras; }

castor_save_format castor_save_format_of(const char *path) {
  const char *base = strrchr(path, '/'), *ext;
  base = base ? base + 1 : path;
  if (!(ext = strrchr(base, '.')) || ext == base) return CASTOR_SAVE_WEIGHTS;
  if (!strcasecmp(ext, ".keras")) return CASTOR_SAVE_KERAS;
  if (!strcasecmp(ext, ".safetensors")) return CASTOR_SAVE_WEIGHTS;
  return CASTOR_SAVE_UNKNOWN;
}

castor_status castor_model_check_save(castor_model *m, const char *path) {
  if (!m || !path) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(m->ctx);
  castor_save_format f = castor_save_format_of(path);
  diag_loc at = {path, 0, 0};
  if (f == CASTOR_SAVE_UNKNOWN)
    diag_error_kind(m->ctx->diag, DIAG_KIND_INVALID_ARGUMENT, at, "castor saves .safetensors (the weights) or .keras "
                    "(a model loaded from a .keras file); the name's extension '%s' is neither (checked without "
                    "regard to case)", strrchr(path, '.'));
  else if (f == CASTOR_SAVE_KERAS && !m->keras)
    diag_error_kind(m->ctx->diag, DIAG_KIND_UNSUPPORTED, at, "only a model loaded from a .keras file can be saved "
                    "as one (castor writes back the file's config.json; a .cast or ONNX model has none): save the "
                    "weights as .safetensors");
  else if (f == CASTOR_SAVE_KERAS)
    fe_keras_save_check(m->keras, path, m->ctx->diag);
  return finish(m->ctx, diag_error_count(m->ctx->diag) ? castor_status_from_diag(m->ctx->diag, CASTOR_ERR_UNSUPPORTED)
                                                       : CASTOR_OK);
}

/* Keras in and out: the trained model as a .keras file (frontend/keras/save.c) */
castor_status castor_program_save_keras(castor_program *p, const castor_model *m, const castor_train_options *to,
                                        const char *path) {
  if (!p || !m || !path) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(p->ctx);
  if (!m->keras)
    return fail(p->ctx, CASTOR_ERR_UNSUPPORTED, "%s: error: only a model loaded from a .keras file can be saved as "
                "one (castor writes back the file's config.json; a .cast or ONNX model has none): save the "
                "weights as .safetensors", path);
  if (p->rt->n_states == 0)
    return fail(p->ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s is not a training program: it has no weights to save", p->rt->name);
  fe_keras_state *st = xcalloc((size_t)p->rt->n_states, sizeof *st);
  bool ok = true;
  for (int i = 0; i < p->rt->n_states && ok; i++) {
    const rt_tensor_desc *t = &p->rt->states[i].t;
    void *data = xmalloc((size_t)rt_state_bytes(p->rt, i) + 1);
    st[i] = (fe_keras_state){t->name, t->dtype, t->rank, t->dims, data, p->rt->states[i].kind == RT_STATE_TRAINABLE};
    ok = cg_exec_state_read(p->x, i, data, p->ctx->diag);
  }
  const char *opt = to && to->optimizer ? to->optimizer : m->defaults.optimizer[0] ? m->defaults.optimizer : "rmsprop";
  ok = ok && fe_keras_save(m->keras, path, st, p->rt->n_states, opt, p->schedule != NULL, p->ctx->diag);
  for (int i = 0; i < p->rt->n_states; i++) free((void *)st[i].data);
  free(st);
  return ok ? CASTOR_OK : finish(p->ctx, castor_status_from_diag(p->ctx->diag, CASTOR_ERR_IO));
}

castor_status castor_program_state_info(const castor_program *p, int i, castor_tensor_info *out) {
  if (!p || !out) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(p->ctx);
  if (i < 0 || i >= p->rt->n_states)
    return fail(p->ctx, CASTOR_ERR_INVALID_ARGUMENT, "state index %d is outside 0..%d", i, p->rt->n_states - 1);
  const rt_tensor_desc *t = &p->rt->states[i].t;
  *out = (castor_tensor_info){t->name, (castor_dtype)t->dtype, t->rank, t->dims};
  return CASTOR_OK;
}

castor_status castor_program_get_state(castor_program *p, const char *name, castor_tensor **out) {
  if (!p || !out) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(p->ctx);
  *out = NULL;
  int i = state_index(p, name);
  if (i < 0)
    return fail(p->ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s has no state '%s'%s", p->rt->name, name ? name : "(null)",
                p->rt->n_states ? "" : " (it is not a training program)");
  const rt_tensor_desc *t = &p->rt->states[i].t;
  castor_status st = castor_tensor_create(p->ctx, (castor_dtype)t->dtype, t->rank, t->dims, out);
  if (st != CASTOR_OK) return st;
  if (!cg_exec_state_read(p->x, i, (*out)->data, p->ctx->diag)) {
    castor_tensor_destroy(*out);
    *out = NULL;
    return finish(p->ctx, castor_status_from_diag(p->ctx->diag, CASTOR_ERR_DEVICE));
  }
  return CASTOR_OK;
}

castor_status castor_program_set_state(castor_program *p, const char *name, const castor_tensor *v) {
  if (!p || !v) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(p->ctx);
  int i = state_index(p, name);
  if (i < 0)
    return fail(p->ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s has no state '%s'%s", p->rt->name, name ? name : "(null)",
                p->rt->n_states ? "" : " (it is not a training program)");
  const rt_tensor_desc *t = &p->rt->states[i].t;
  bool same = v->dtype == (castor_dtype)t->dtype && v->rank == t->rank;
  for (int r = 0; same && r < t->rank; r++) same = v->dims[r] == t->dims[r];
  if (!same) {
    str_buf want, got;
    str_buf_init(&want), str_buf_init(&got);
    shape_str(&want, (castor_dtype)t->dtype, t->rank, t->dims);
    shape_str(&got, v->dtype, v->rank, v->dims);
    castor_status st = fail(p->ctx, CASTOR_ERR_INVALID_ARGUMENT, "state %s is %s, the tensor is %s", name,
                            str_buf_cstr(&want), str_buf_cstr(&got));
    str_buf_fini(&want), str_buf_fini(&got);
    return st;
  }
  if (!cg_exec_state_write(p->x, i, v->data, p->ctx->diag))
    return finish(p->ctx, castor_status_from_diag(p->ctx->diag, CASTOR_ERR_DEVICE));
  return CASTOR_OK;
}

castor_status castor_compile_to(castor_model *m, const castor_compile_options *opts,
                                const castor_driver_options *dopts, castor_codegen_fn fn, void *fn_arg) {
  return fn ? compile(m, opts, dopts, fn, fn_arg, NULL) : CASTOR_ERR_INVALID_ARGUMENT;
}

void castor_program_destroy(castor_program *p) {
  if (!p) return;
  cg_exec_destroy(p->x);
  for (int i = 0; i < p->n_untrained; i++) free((void *)p->untrained[i].name), free((void *)p->untrained[i].data);
  free(p->untrained);
  rt_lr_schedule_fini(p->schedule), free(p->schedule);
  hmap_fini(&p->state_names);
  free(p);
}

castor_status castor_program_stats(const castor_program *p, int64_t batch, castor_run_stats *out) {
  if (!p || !out || batch < 1) return CASTOR_ERR_INVALID_ARGUMENT;
  const rt_program *rt = p->rt;
  memset(out, 0, sizeof *out);
  if (!rt_program_workspace_bytes(rt, batch, &out->workspace_bytes)) return CASTOR_ERR_INVALID_ARGUMENT;
  out->weight_bytes = rt_program_const_bytes(rt);
  out->thread_scratch_bytes = rt_program_scratch_bytes(rt);
  out->note = p->x ? p->x->note : NULL;
  for (int i = 0; i < rt->n_inputs + rt->n_outputs; i++) {
    const rt_tensor_desc *t = i < rt->n_inputs ? &rt->inputs[i] : &rt->outputs[i - rt->n_inputs];
    const rt_buffer *b = &rt->buffers[t->buffer];
    out->io_bytes += b->bytes_per_row * batch + b->bytes_fixed;
  }
  for (int i = 0; i < rt->n_launches; i++) {
    const rt_launch *l = &rt->launches[i];
    out->flops += l->flops_per_row * (l->batched ? batch : l->rows_fixed);
  }
  out->threads = p->x->threads;
  /* by image on several threads: each other thread has its passes' slots (CPU) */
  out->workspace_bytes += (rt_program_workspaces(rt, out->threads) - 1) * rt_program_pass_bytes(rt);
  out->launches = rt->n_launches;
  if (rt_program_by_image(rt))
    out->images = rt->images, out->image_launches = rt->image_launches;
  return CASTOR_OK;
}

int castor_program_num_inputs(const castor_program *p) { return p ? p->rt->n_inputs : 0; }
int castor_program_num_outputs(const castor_program *p) { return p ? p->rt->n_outputs : 0; }

static castor_status info(const rt_tensor_desc *t, castor_tensor_info *out) {
  out->name = t->name;
  out->dtype = (castor_dtype)t->dtype;
  out->rank = t->rank;
  out->dims = t->dims;
  return CASTOR_OK;
}

castor_status castor_program_input_info(const castor_program *p, int i, castor_tensor_info *out) {
  if (!p || !out || i < 0 || i >= p->rt->n_inputs) return CASTOR_ERR_INVALID_ARGUMENT;
  return info(&p->rt->inputs[i], out);
}

castor_status castor_program_output_info(const castor_program *p, int i, castor_tensor_info *out) {
  if (!p || !out || i < 0 || i >= p->rt->n_outputs) return CASTOR_ERR_INVALID_ARGUMENT;
  return info(&p->rt->outputs[i], out);
}

/* ---- tensors ---- */

/* castor_tensor_create (ext NULL: its own memory) and castor_tensor_wrap
 * (over ext), fn naming the caller in messages. */
static castor_status tensor_new(castor_context *ctx, const char *fn, castor_dtype dtype, int rank, const int64_t *dims,
                                void *ext, castor_tensor **out_tensor) {
  if (!ctx) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(ctx);
  if (!out_tensor) return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s: NULL out_tensor", fn);
  *out_tensor = NULL;
  if ((unsigned)dtype >= DT_COUNT)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", fn, (int)dtype);
  if (rank < 0 || rank > RT_MAX_RANK || (rank > 0 && !dims))
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s: rank must be 0-%d, got %d", fn, RT_MAX_RANK, rank);
  int64_t numel = 1, nbytes;
  for (int r = 0; r < rank; r++) {
    if (dims[r] < 0)
      return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s: dimension %d is %lld; dimensions must be >= 0", fn, r,
                  (long long)dims[r]);
    if (!size_mul_ok(numel, dims[r], &numel))
      return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s: the element count overflows", fn);
  }
  if (!size_mul_ok(numel, dtype_size((ir_dtype)dtype), &nbytes) || nbytes > IR_MAX_TENSOR_BYTES)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s: the tensor is too large", fn);
  if (ext && ((uintptr_t)ext & 63))
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s: the data at %p is not 64-byte aligned", fn, ext);
  castor_tensor *t = calloc(1, sizeof *t);
  if (t && ext) {
    t->ctx = ctx, t->dtype = dtype, t->rank = rank, t->numel = numel, t->nbytes = (size_t)nbytes, t->data = ext;
    t->borrowed = true;
    for (int r = 0; r < rank; r++) t->dims[r] = dims[r];
    *out_tensor = t;
    return finish(ctx, CASTOR_OK);
  }
  /* an empty tensor (a dimension 0) still gets one aligned block: its data
   * pointer is never NULL, and no kernel reads or writes it */
  void *data = t ? aligned_alloc(64, nbytes ? ((size_t)nbytes + 63) & ~(size_t)63 : 64) : NULL;
  if (!data) {
    free(t);
    return fail(ctx, CASTOR_ERR_NOMEM, "%s: cannot allocate %lld bytes", fn, (long long)nbytes);
  }
  memset(data, 0, (size_t)nbytes);
  t->ctx = ctx, t->dtype = dtype, t->rank = rank, t->numel = numel, t->nbytes = (size_t)nbytes, t->data = data;
  for (int r = 0; r < rank; r++) t->dims[r] = dims[r];
  *out_tensor = t;
  return finish(ctx, CASTOR_OK);
}

castor_status castor_tensor_create(castor_context *ctx, castor_dtype dtype, int rank, const int64_t *dims,
                                   castor_tensor **out_tensor) {
  return tensor_new(ctx, "castor_tensor_create", dtype, rank, dims, NULL, out_tensor);
}

castor_status castor_tensor_wrap(castor_context *ctx, castor_dtype dtype, int rank, const int64_t *dims, void *data,
                                 castor_tensor **out_tensor) {
  if (ctx && !data) {
    begin(ctx);
    if (out_tensor) *out_tensor = NULL;
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_tensor_wrap: data is NULL");
  }
  return tensor_new(ctx, "castor_tensor_wrap", dtype, rank, dims, data, out_tensor);
}

void castor_tensor_destroy(castor_tensor *t) {
  if (!t) return;
  if (!t->borrowed) free(t->data);
  free(t);
}

void *castor_tensor_data(castor_tensor *t) { return t ? t->data : NULL; }
castor_dtype castor_tensor_dtype(const castor_tensor *t) { return t ? t->dtype : CASTOR_F32; }
int castor_tensor_rank(const castor_tensor *t) { return t ? t->rank : 0; }
const int64_t *castor_tensor_dims(const castor_tensor *t) { return t ? t->dims : NULL; }
int64_t castor_tensor_numel(const castor_tensor *t) { return t ? t->numel : 0; }
size_t castor_tensor_nbytes(const castor_tensor *t) { return t ? t->nbytes : 0; }

castor_status castor_tensor_load_npy(castor_context *ctx, const char *path, castor_tensor **out_tensor) {
  return castor_tensor_load_npy_as(ctx, path, false, out_tensor);
}

castor_status castor_tensor_load_npy_as(castor_context *ctx, const char *path, bool to_f32,
                                        castor_tensor **out_tensor) {
  if (!ctx) return CASTOR_ERR_INVALID_ARGUMENT;
  begin(ctx);
  if (!path || !out_tensor) return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_tensor_load_npy: NULL argument");
  *out_tensor = NULL;
  npy_array a;
  if (!npy_read(path, &a, ctx->diag) || ((a.is_f64 || to_f32) && !npy_to_f32(&a, path, ctx->diag))) {
    npy_fini(&a);
    return finish(ctx, castor_status_from_diag(ctx->diag, CASTOR_ERR_PARSE));
  }
  castor_tensor *t = NULL;
  castor_status st = castor_tensor_create(ctx, (castor_dtype)a.dtype, a.rank, a.dims, &t);
  if (st == CASTOR_OK) memcpy(t->data, a.data, (size_t)a.nbytes), *out_tensor = t;
  npy_fini(&a);
  return st;
}

castor_status castor_tensor_save_npy(castor_tensor *t, const char *path) {
  if (!t) return CASTOR_ERR_INVALID_ARGUMENT;
  castor_context *ctx = t->ctx;
  begin(ctx);
  if (!path) return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_tensor_save_npy: NULL path");
  if (t->dtype == CASTOR_BF16)
    return fail(ctx, CASTOR_ERR_UNSUPPORTED, "%s: bfloat16 has no NumPy .npy dtype", path);
  if (!npy_write(path, (rt_dtype)t->dtype, t->rank, t->dims, t->data, ctx->diag))
    return finish(ctx, castor_status_from_diag(ctx->diag, CASTOR_ERR_IO));
  return finish(ctx, CASTOR_OK);
}

/* ---- run ---- */

static void shape_str(str_buf *b, castor_dtype dt, int rank, const int64_t *dims) {
  str_buf_printf(b, "%s[", castor_dtype_name(dt));
  for (int r = 0; r < rank; r++) {
    if (r) str_buf_putc(b, ',');
    if (dims[r] < 0) str_buf_putc(b, 'N');
    else str_buf_printf(b, "%lld", (long long)dims[r]);
  }
  str_buf_putc(b, ']');
}

/* Checks t against desc; the batch comes from the first batched tensor. */
static bool check_tensor(castor_context *ctx, const char *what, const rt_tensor_desc *desc,
                         const castor_tensor *t, int64_t *batch) {
  bool ok = t->dtype == (castor_dtype)desc->dtype && t->rank == desc->rank, batch_differs = false;
  int64_t seen = *batch;
  for (int r = 0; ok && r < desc->rank; r++) {
    if (desc->dims[r] >= 0) ok = t->dims[r] == desc->dims[r];
    else if (seen < 0) seen = t->dims[r];
    else ok = !(batch_differs = t->dims[r] != seen);
  }
  if (ok) {
    *batch = seen;
    return true;
  }
  str_buf want, got;
  str_buf_init(&want), str_buf_init(&got);
  shape_str(&want, (castor_dtype)desc->dtype, desc->rank, desc->dims);
  shape_str(&got, t->dtype, t->rank, t->dims);
  if (batch_differs)
    diag_error(ctx->diag, (diag_loc){0}, "%s '%s': batch %lld differs from the batch %lld of the tensors before it",
               what, desc->name, (long long)t->dims[0], (long long)seen);
  else
    diag_error(ctx->diag, (diag_loc){0}, "%s '%s': expected %s, got %s", what, desc->name, str_buf_cstr(&want),
               str_buf_cstr(&got));
  str_buf_fini(&want), str_buf_fini(&got);
  return false;
}

castor_status castor_program_run(castor_program *p, castor_tensor *const *inputs, int n_inputs,
                                 castor_tensor **outputs, int n_outputs) {
  if (!p) return CASTOR_ERR_INVALID_ARGUMENT;
  castor_context *ctx = p->ctx;
  begin(ctx);
  const rt_program *rt = p->rt;
  if (n_inputs != rt->n_inputs || n_outputs != rt->n_outputs)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "program '%s' takes %d input(s) and %d output(s), got %d and %d",
                rt->name, rt->n_inputs, rt->n_outputs, n_inputs, n_outputs);
  if ((n_inputs && !inputs) || (n_outputs && !outputs))
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_program_run: NULL tensor array");
  int64_t batch = -1;
  for (int i = 0; i < n_inputs; i++) {
    if (!inputs[i]) return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "input %d ('%s') is NULL", i, rt->inputs[i].name);
    if (!check_tensor(ctx, "input", &rt->inputs[i], inputs[i], &batch)) return finish(ctx, CASTOR_ERR_INVALID_ARGUMENT);
    if (!rt_check_indices(&rt->inputs[i], inputs[i]->dims, inputs[i]->data, ctx->diag)) /* a gather's indices, sequence lengths */
      return finish(ctx, CASTOR_ERR_INVALID_ARGUMENT);
  }
  if (batch < 0) batch = 1;
  if (batch == 0 && rt->n_states > 0) /* a step's mean over no samples is 0/0 */
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "%s is a training step: its batch must hold at least 1 sample, got 0",
                rt->name);
  for (int i = 0; i < n_outputs; i++)
    if (outputs[i] && !check_tensor(ctx, "output", &rt->outputs[i], outputs[i], &batch))
      return finish(ctx, CASTOR_ERR_INVALID_ARGUMENT);
  const void **in = xcalloc((size_t)n_inputs + 1, sizeof *in);
  void **out = xcalloc((size_t)n_outputs + 1, sizeof *out);
  bool *created = xcalloc((size_t)n_outputs + 1, sizeof *created);
  castor_status st = CASTOR_OK;
  for (int i = 0; i < n_inputs; i++) in[i] = inputs[i]->data;
  for (int i = 0; i < n_outputs && st == CASTOR_OK; i++) {
    if (!outputs[i]) {
      const rt_tensor_desc *d = &rt->outputs[i];
      int64_t dims[RT_MAX_RANK];
      for (int r = 0; r < d->rank; r++) dims[r] = d->dims[r] < 0 ? batch : d->dims[r];
      castor_tensor *t = NULL;
      st = castor_tensor_create(ctx, (castor_dtype)d->dtype, d->rank, dims, &t);
      if (st != CASTOR_OK) break;
      outputs[i] = t;
      created[i] = true;
    }
    out[i] = outputs[i]->data;
  }
  if (st == CASTOR_OK && p->schedule) { /* training options: the rate at the applied steps so far */
    int64_t it = 0;
    float lr = 0;
    if (!cg_exec_state_read(p->x, p->iter_state, &it, ctx->diag)) st = castor_status_from_diag(ctx->diag, CASTOR_ERR_DEVICE);
    else if (lr = rt_lr_schedule_at(p->schedule, it), !cg_exec_state_write(p->x, p->lr_state, &lr, ctx->diag))
      st = castor_status_from_diag(ctx->diag, CASTOR_ERR_DEVICE);
  }
  if (st == CASTOR_OK) {
    begin(ctx);
    if (!p->x->backend->run(p->x, batch, in, out, ctx->diag)) st = castor_status_from_diag(ctx->diag, CASTOR_ERR_DEVICE);
  }
  if (st != CASTOR_OK)
    for (int i = 0; i < n_outputs; i++)
      if (created[i]) castor_tensor_destroy(outputs[i]), outputs[i] = NULL;
  free(in), free(out), free(created);
  return finish(ctx, st);
}

castor_status castor_program_time(castor_program *p, castor_tensor *const *inputs, int n_inputs, int warmup,
                                  int iters, double *out_ms) {
  if (!p) return CASTOR_ERR_INVALID_ARGUMENT;
  castor_context *ctx = p->ctx;
  begin(ctx);
  const rt_program *rt = p->rt;
  if (n_inputs != rt->n_inputs || (n_inputs && !inputs) || iters < 1 || warmup < 0 || !out_ms)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_program_time: bad arguments");
  int64_t batch = -1;
  for (int i = 0; i < n_inputs; i++)
    if (!inputs[i] || !check_tensor(ctx, "input", &rt->inputs[i], inputs[i], &batch))
      return finish(ctx, CASTOR_ERR_INVALID_ARGUMENT);
  if (batch < 0) batch = 1;
  if (batch == 0)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_program_time: the batch is empty (0 rows): nothing to time");
  const void **in = xcalloc((size_t)n_inputs + 1, sizeof *in);
  for (int i = 0; i < n_inputs; i++) in[i] = inputs[i]->data;
  castor_status st = CASTOR_OK;
  if (!p->x->backend->time(p->x, batch, in, warmup, iters, out_ms, ctx->diag))
    st = castor_status_from_diag(ctx->diag, CASTOR_ERR_DEVICE);
  free(in);
  return finish(ctx, st);
}

castor_status castor_program_profile_runs(castor_program *p, castor_tensor *const *inputs, int n_inputs, int runs,
                                         rt_profile *prof, double *out_ms, int64_t *out_batch) {
  if (!p) return CASTOR_ERR_INVALID_ARGUMENT;
  castor_context *ctx = p->ctx;
  begin(ctx);
  const rt_program *rt = p->rt;
  if (n_inputs != rt->n_inputs || (n_inputs && !inputs) || runs < 1 || !prof || !out_ms || !out_batch)
    return fail(ctx, CASTOR_ERR_INVALID_ARGUMENT, "castor_program_profile: bad arguments");
  if (!p->x->backend->profile)
    return fail(ctx, CASTOR_ERR_UNSUPPORTED,
                "the %s target does not time kernels one by one (--profile); --repeat times whole runs",
                p->x->backend->name);
  if (rt->n_states > 0)
    return fail(ctx, CASTOR_ERR_UNSUPPORTED, "%s is a training program: profiles are of inference programs",
                rt->name);
  int64_t batch = -1;
  for (int i = 0; i < n_inputs; i++)
    if (!inputs[i] || !check_tensor(ctx, "input", &rt->inputs[i], inputs[i], &batch))
      return finish(ctx, CASTOR_ERR_INVALID_ARGUMENT);
  if (batch < 0) batch = 1;
  const void **in = xcalloc((size_t)n_inputs + 1, sizeof *in);
  void **out = xcalloc((size_t)rt->n_outputs + 1, sizeof *out);
  castor_status st = CASTOR_OK;
  for (int i = 0; i < n_inputs; i++) in[i] = inputs[i]->data;
  for (int i = 0; i < rt->n_outputs && st == CASTOR_OK; i++) {
    const rt_buffer *b = &rt->buffers[rt->outputs[i].buffer];
    int64_t n;
    if (!size_mul_ok(b->bytes_per_row, batch, &n) || !size_add_ok(n, b->bytes_fixed + 63, &n) ||
        !(out[i] = aligned_alloc(64, ((size_t)n & ~(size_t)63) + 64)))
      st = fail(ctx, CASTOR_ERR_NOMEM, "cannot allocate output '%s' for batch %lld", rt->outputs[i].name,
                (long long)batch);
  }
  *out_ms = 0;
  for (int r = 0; r < runs && st == CASTOR_OK; r++) {
    int64_t t0 = rt_clock_ns();
    if (!p->x->backend->profile(p->x, batch, in, out, prof, ctx->diag))
      st = castor_status_from_diag(ctx->diag, CASTOR_ERR_DEVICE);
    *out_ms += (double)(rt_clock_ns() - t0) / 1e6;
  }
  *out_batch = batch;
  for (int i = 0; i < rt->n_outputs; i++) free(out[i]);
  free(in), free(out);
  return finish(ctx, st);
}

const rt_program *castor_program_desc(const castor_program *p) { return p ? p->rt : NULL; }
int castor_program_threads(const castor_program *p) { return p ? p->x->threads : 0; }

/* ---- for the other files of the API layer (api/internal.h) ---- */

castor_context *castor_model_context(const castor_model *m) { return m ? m->ctx : NULL; }
diag_sink *castor_context_diag(castor_context *ctx) { return ctx->diag; }
void castor_context_begin(castor_context *ctx) { begin(ctx); }
castor_status castor_context_finish(castor_context *ctx, castor_status st) { return finish(ctx, st); }
const ir_graph *castor_model_graph(const castor_model *m) { return m ? m->graph : NULL; }
