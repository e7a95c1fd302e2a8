/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backends.c: the table of backends this build has, and the lookups over
 * it: by public target (castor_target_backend), by name (--target=), and
 * their names for messages.
 *
 * It sits in api/ because it names every target (codegen/cpu,
 * codegen/nvptx): codegen/ keeps only the interface (cg_backend.h) and what
 * all backends share (cg_backend.c), so no call runs from codegen's root
 * up into a target. A new backend is one row here.
 */
#include <stdio.h>
#include <string.h>

#include "api/internal.h"

static const struct {
  castor_target target;
  const cg_backend *backend;
} backends[] = {
    {CASTOR_TARGET_CPU, &cg_backend_cpu},
    {CASTOR_TARGET_CUDA, &cg_backend_cuda},
};
enum { N_BACKENDS = sizeof backends / sizeof backends[0] };

const cg_backend *castor_target_backend(castor_target t) {
  for (int i = 0; i < N_BACKENDS; i++)
    if (backends[i].target == t) return backends[i].backend;
  return NULL;
}

const cg_backend *cg_backend_find(const char *name, size_t n) {
  for (int i = 0; i < N_BACKENDS; i++) {
    const char *bn = backends[i].backend->name;
    if (strlen(bn) == n && memcmp(bn, name, n) == 0) return backends[i].backend;
  }
  return NULL;
}

const char *cg_backend_names(void) {
  static char names[64];
  if (!names[0]) { /* racing callers write the same bytes */
    size_t at = 0;
    for (int i = 0; i < N_BACKENDS; i++)
      at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", backends[i].backend->name);
  }
  return names;
}

int castor_backend_count(void) { return N_BACKENDS; }

const cg_backend *castor_backend_at(int i) { return i >= 0 && i < N_BACKENDS ? backends[i].backend : NULL; }
