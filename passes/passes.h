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

#include "../ir/ir.h"

typedef struct pass_options {
  bool verify_each;       /* run ir_verify after every pass */
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
#include "passes.def"
#undef PASS

/* Looks up a pass by name; NULL if unknown. */
pass_fn pass_lookup(const char *name, size_t len);
/* Names of all passes, comma-separated (for --help). */
const char *pass_list(void);

/* The default compile pipeline for the CPU target. */
#define PASS_PIPELINE_DEFAULT "verify,dce"

/* Checks a pipeline string without running it (unknown pass names are
 * errors). */
bool pass_pipeline_check(const char *pipeline, diag_sink *d);
bool pass_run_pipeline(ir_graph *g, const char *pipeline, const pass_options *o, diag_sink *d);

#endif
