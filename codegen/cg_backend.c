/*
 * cg_backend.c: the registry of backends and what every backend shares:
 * the support check before compiling (cg_backend.h has the interface).
 */
#include "codegen/cg_backend.h"

#include <stdio.h>
#include <string.h>

static const cg_backend *const backends[] = {&cg_backend_cpu, &cg_backend_cuda};
enum { N_BACKENDS = sizeof backends / sizeof backends[0] };

void cg_backend_options_init(cg_backend_options *o) {
  memset(o, 0, sizeof *o);
  cg_options_init(&o->cg);
  o->device = -1;
}

const cg_backend *cg_backend_find(const char *name, size_t n) {
  for (int i = 0; i < N_BACKENDS; i++)
    if (strlen(backends[i]->name) == n && memcmp(backends[i]->name, name, n) == 0) return backends[i];
  return NULL;
}

const char *cg_backend_names(void) {
  static char names[64];
  if (!names[0]) { /* racing callers write the same bytes */
    size_t at = 0;
    for (int i = 0; i < N_BACKENDS; i++)
      at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", backends[i]->name);
  }
  return names;
}

bool cg_backend_check(const cg_backend *b, const ir_graph *g, diag_sink *d) {
  bool ok = true;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    const char *why = b->unsupported(n);
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
