/* SPDX-License-Identifier: Apache-2.0 */
/*
 * passes.h: the pass manager. A pipeline is a comma-separated string of pass
 * names from passes.def ("verify,dce"). The manager runs each pass with a
 * scratch arena it resets afterwards, verifies the graph after each pass on
 * request (always in tests), and dumps the IR after a chosen pass or all
 * passes, to a buffer or to one file per pass in a directory
 * (NN.after-PASS.cir, XLA style).
 */
#ifndef CASTOR_PASSES_H
#define CASTOR_PASSES_H

#include "ir/ir.h"

/* Options of the autocast pass (see autocast.c). */
typedef struct pass_autocast_options {
  const char *fp32_ops;    /* comma-separated op names forced to f32 ("gelu,add"), or NULL */
  const char *fp32_layers; /* comma-separated layer names forced to f32, or NULL */
  bool keep_16bit_outputs; /* do not cast 16-bit model outputs to f32 */
} pass_autocast_options;

/* What the grad pass builds: the loss, the optimizer and its
 * hyperparameters (0 or < 0: Keras 3's default), the loss scale. */
typedef enum pass_loss { PASS_LOSS_SPARSE_XENT, PASS_LOSS_XENT, PASS_LOSS_MSE } pass_loss;
typedef enum pass_optimizer { PASS_OPT_RMSPROP, PASS_OPT_ADAM, PASS_OPT_SGD, PASS_OPT_NONE, PASS_OPT_ADAMW } pass_optimizer;

typedef struct pass_train_options {
  pass_loss loss;
  bool from_logits;          /* the cross-entropy takes logits (no softmax output) */
  pass_optimizer optimizer;  /* NONE: the gradients become outputs grad_<weight> */
  double learning_rate;      /* <= 0: the optimizer's default (sgd 0.01, else 0.001) */
  double momentum;           /* sgd and rmsprop; 0: none */
  bool nesterov;             /* sgd */
  bool centered;             /* rmsprop */
  double rho, beta_1, beta_2, epsilon; /* 0: 0.9, 0.9, 0.999, 1e-7 */
  double loss_scale;         /* < 0: dynamic under mixed_float16, else none; 0: dynamic;
                              * > 0: fixed (1: none) */
  double loss_scale_min;     /* the dynamic scale's floor (0: none) */
  bool loss_only;            /* evaluation: the weights as variables and the loss, no gradients */
  /* training options (Keras's names): */
  double weight_decay;       /* adamw's decoupled weight decay (< 0: Keras's 0.004) */
  double loss_scale_initial; /* the dynamic scale's start (0: 2^15, Keras initial_scale) */
  double loss_scale_growth_steps; /* finite steps after which it doubles (0: 2000, Keras
                              * dynamic_growth_steps) */
  double clipnorm, clipvalue, global_clipnorm; /* gradient clipping, at most one (0: none) */
} pass_train_options;

void pass_train_options_init(pass_train_options *o);
bool pass_loss_from_name(const char *s, pass_loss *out); /* Keras's names, "mse" too */
bool pass_optimizer_from_name(const char *s, pass_optimizer *out);
const char *pass_loss_name(pass_loss l);
/* Sets one option from its command-line form: key without "--" (loss,
 * optimizer, learning-rate, momentum, rho, beta-1, beta-2, epsilon,
 * loss-scale = dynamic|none|N, loss-scale-min, weight-decay,
 * loss-scale-initial, loss-scale-growth-steps, clipnorm, clipvalue,
 * global-clipnorm) and its value; false with an
 * error naming the option. --nesterov, --centered and --from-logits are
 * flags. */
bool pass_train_option(pass_train_options *o, const char *key, const char *value, diag_sink *d);
const char *pass_optimizer_name(pass_optimizer o);

typedef struct pass_options {
  bool verify_each;       /* run ir_verify after every pass */
  pass_autocast_options autocast;
  pass_train_options train; /* the grad pass's */
  const char *dump_after; /* pass name, "all", or NULL */
  const char *dump_dir;   /* write dumps as files here (NULL: to dump_out) */
  str_buf *dump_out;      /* where dumps go when dump_dir is NULL (may be NULL) */
} pass_options;

void pass_options_init(pass_options *o);

typedef struct pass_context {
  diag_sink *diag;
  arena *scratch; /* reset after the pass */
  const pass_options *opts;
} pass_context;

typedef bool (*pass_fn)(ir_graph *g, pass_context *ctx);

#define PASS(ident, name, summary) bool pass_##ident##_run(ir_graph *g, pass_context *ctx);
#include "passes/passes.def"
#undef PASS

/* The fuse passes' driver (fuse-gelu, fuse-silu; passes/fuse_unary.c): in
 * a graph with a `trigger` op, each f32 mul that `match` reads as a function
 * of one x (it returns x, or NULL) becomes the unary `op` of x in place, with
 * `note`. match gets each node's use count and whether it is a graph output,
 * both indexed by id. */
typedef ir_node *(*pass_fuse_match)(ir_node *mul, const int *uses, const bool *output);
bool pass_fuse_unary(ir_graph *g, ir_op trigger, ir_op op, const char *note, pass_fuse_match match);

/* Looks up a pass by name; NULL if unknown. */
pass_fn pass_lookup(const char *name, size_t len);
/* Names of all passes, comma-separated (for --help). */
const char *pass_list(void);

/* The default compile pipeline for the CPU target. */
#define PASS_PIPELINE_DEFAULT "verify,fold-empty,fold-bn,hoist-pool,fuse-gelu,fuse-silu,fold-layout,autocast,cast-cleanup,fold-constants,dce"
/* The pipeline of the cuda target: pad8 before fold-constants, so pads of
 * weights fold (also for the CPU by option). */
#define PASS_PIPELINE_PAD8 "verify,fold-empty,fold-bn,hoist-pool,fuse-gelu,fuse-silu,fold-layout,autocast,cast-cleanup,pad8,fold-constants,dce"

/* The training step: the model's pipeline, then grad (the step is the
 * transpose of the mixed-precision forward program), then the clean-ups. */
#define PASS_PIPELINE_TRAIN "verify,autocast,cast-cleanup,grad,cast-cleanup,fold-constants,dce"
#define PASS_PIPELINE_TRAIN_PAD8 "verify,autocast,cast-cleanup,grad,cast-cleanup,pad8,fold-constants,dce"

/* Checks the autocast options (unknown op names, empty list items) before a
 * pipeline runs; layer names are checked against the graph by the pass. */
bool pass_autocast_options_check(const pass_autocast_options *o, diag_sink *d);
/* Does --fp32-layers or --fp32-ops force node n to f32 (whatever its policy)? */
bool pass_autocast_forces_f32(const pass_autocast_options *o, const ir_node *n);

/* The cast report of a compiled graph (castor dump --casts): per layer its
 * compute dtype, the rule that decided it, the casts it needs at run time
 * and its weight bytes per dtype, then a total line. */
void pass_cast_report(const ir_graph *g, str_buf *out);

/* Checks a pipeline string without running it (unknown pass names are
 * errors). */
bool pass_pipeline_check(const char *pipeline, diag_sink *d);
bool pass_run_pipeline(ir_graph *g, const char *pipeline, const pass_options *o, diag_sink *d);

#endif
