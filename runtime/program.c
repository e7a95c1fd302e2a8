/*
 * program.c: runs a compiled program on the CPU: lays out the scratch
 * slots for the batch, fills the buffer table and calls each launch over
 * its rows. The launch loop is where the thread pool of the fast-kernels
 * work splits rows; today every launch runs on the calling thread.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

void rt_program_destroy(rt_program *p) {
  if (!p) return;
  if (p->owner_destroy) p->owner_destroy(p->owner);
  arena_destroy(p->arena); /* p lives in its arena */
}

static int64_t align64(int64_t x) { return (x + 63) & ~(int64_t)63; }

static bool slot_bytes(const rt_slot *s, int64_t batch, int64_t *out) {
  int64_t n;
  return size_mul_ok(s->bytes_per_row, batch, &n) && size_add_ok(n, s->bytes_fixed, &n) &&
         size_add_ok(n, 63, out) && ((*out = align64(n)), true);
}

bool rt_program_workspace_bytes(const rt_program *p, int64_t batch, int64_t *out) {
  int64_t total = 0;
  for (int s = 0; s < p->n_slots; s++) {
    int64_t n;
    if (!slot_bytes(&p->slots[s], batch, &n) || !size_add_ok(total, n, &total)) return false;
  }
  *out = total;
  return true;
}

bool rt_program_run(const rt_program *p, int64_t batch, const void *const *inputs,
                    void *const *outputs, void *workspace, diag_sink *d) {
  if (batch < 1) {
    diag_error(d, (diag_loc){0}, "batch size must be at least 1, got %lld", (long long)batch);
    return false;
  }
  int64_t ws_bytes;
  if (!rt_program_workspace_bytes(p, batch, &ws_bytes)) {
    diag_error(d, (diag_loc){0}, "batch size %lld is too large: the workspace size overflows",
               (long long)batch);
    return false;
  }
  void *owned = NULL;
  if (!workspace && ws_bytes > 0) {
    if ((uint64_t)ws_bytes > SIZE_MAX || !(owned = aligned_alloc(64, (size_t)ws_bytes))) {
      diag_error(d, (diag_loc){0}, "cannot allocate %lld bytes of workspace for batch %lld",
                 (long long)ws_bytes, (long long)batch);
      return false;
    }
    workspace = owned;
  }
  int64_t *slot_off = xcalloc((size_t)p->n_slots + 1, sizeof *slot_off);
  for (int s = 0; s < p->n_slots; s++) { /* prefix sums of 64-byte aligned slot sizes */
    int64_t n = 0;
    CASTOR_ASSERT(slot_bytes(&p->slots[s], batch, &n));
    slot_off[s + 1] = slot_off[s] + n;
  }
  char **bufs = xcalloc((size_t)p->n_buffers + 1, sizeof *bufs);
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    switch (buf->kind) {
    case RT_BUF_CONST: bufs[b] = (char *)buf->data; break;
    case RT_BUF_INPUT: bufs[b] = (char *)inputs[buf->index]; break;
    case RT_BUF_OUTPUT: bufs[b] = (char *)outputs[buf->index]; break;
    case RT_BUF_SCRATCH: bufs[b] = (char *)workspace + slot_off[buf->index]; break;
    }
  }
  for (int i = 0; i < p->n_launches; i++) {
    const rt_launch *l = &p->launches[i];
    int64_t rows = l->batched ? batch : l->rows_fixed;
    l->fn(bufs, batch, 0, rows);
  }
  free(bufs);
  free(slot_off);
  free(owned);
  return true;
}
