/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cg_backend.c: what every backend shares: the options' defaults, the
 * support check before compiling (each backend's table of exceptions),
 * compile-after-check, and the exec's destroy and state accessors
 * (cg_backend.h has the interface). The table of backends is the API's (api/backends.c): it
 * names every target, and codegen's root calls none of them.
 */
#include "codegen/cg_backend.h"

#include <string.h>

void cg_options_init(cg_options *o) {
  memset(o, 0, sizeof *o);
  o->opt_level = 2;
}

void cg_backend_options_init(cg_backend_options *o) {
  memset(o, 0, sizeof *o);
  cg_options_init(&o->cg);
  o->device = -1;
}

const char *cg_backend_unsupported(const cg_backend *b, ir_op op) {
  CASTOR_ASSERT(op >= 0 && op < IR_OP_COUNT);
  return b->exceptions[op];
}

bool cg_backend_check(const cg_backend *b, const ir_graph *g, diag_sink *d) {
  bool ok = true;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    const char *why = cg_backend_unsupported(b, n->op);
    if (!why) continue;
    diag_error_kind(d, DIAG_KIND_UNSUPPORTED, n->loc, "%s (%%%s) is not supported by the %s target: %s",
                    ir_op_name(n->op), n->name, b->name, why);
    ok = false;
  }
  return ok;
}

cg_exec *cg_backend_compile(const cg_backend *b, const ir_graph *g, const cg_backend_options *o,
                            diag_sink *d) {
  return cg_backend_check(b, g, d) ? b->compile(g, o, d) : NULL;
}

void cg_exec_destroy(cg_exec *x) {
  if (x) x->backend->destroy(x);
}

/* State i of x exists and x's backend keeps state; else false with why. */
static bool state_ok(const cg_exec *x, int i, bool has_accessor, diag_sink *d) {
  if (i < 0 || i >= x->desc->n_states) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "state index %d is outside 0..%d", i,
                    x->desc->n_states - 1);
    return false;
  }
  if (!has_accessor) {
    diag_error_kind(d, DIAG_KIND_UNSUPPORTED, (diag_loc){0},
                    "the %s target keeps no training state (training runs on the cpu target)", x->backend->name);
    return false;
  }
  return true;
}

bool cg_exec_state_read(cg_exec *x, int i, void *dst, diag_sink *d) {
  return state_ok(x, i, x->backend->state_read != NULL, d) && x->backend->state_read(x, i, dst, d);
}

bool cg_exec_state_write(cg_exec *x, int i, const void *src, diag_sink *d) {
  return state_ok(x, i, x->backend->state_write != NULL, d) && x->backend->state_write(x, i, src, d);
}
