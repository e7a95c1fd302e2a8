/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxemu_mem.c: the emulated GPU's global memory (ptxemu.h).
 *
 * Each allocation gets a synthetic device address, 256-byte aligned as
 * cuMemAlloc's are, with at least 1 MiB of unmapped addresses after it,
 * so an access that runs off an allocation hits nothing and is reported
 * instead of silently reading a neighbour. Addresses are never reused.
 * Fresh memory is poisoned with 0xff bytes (NaN as f32, f16 and bf16).
 */
#include <stdlib.h>
#include <string.h>

#include "ptxemu_mem.h"

struct pe_memory {
  pe_region *r;
  int n, cap;
  uint64_t next;
  size_t live;
  int last; /* the region the last lookup hit */
};

pe_memory *pe_memory_create(void) {
  pe_memory *m = calloc(1, sizeof *m);
  m->next = (uint64_t)1 << 40;
  return m;
}

void pe_memory_destroy(pe_memory *m) {
  if (!m) return;
  for (int i = 0; i < m->n; i++) free(m->r[i].data);
  free(m->r);
  free(m);
}

uint64_t pe_alloc(pe_memory *m, size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > ((size_t)1 << 36)) return 0;
  uint8_t *d = malloc(bytes);
  if (!d) return 0;
  memset(d, 0xff, bytes);
  if (m->n == m->cap) {
    m->cap = m->cap ? m->cap * 2 : 16;
    m->r = realloc(m->r, (size_t)m->cap * sizeof *m->r);
  }
  uint64_t a = m->next;
  m->r[m->n++] = (pe_region){a, bytes, d};
  m->next = (a + bytes + ((uint64_t)1 << 20) + 255) & ~(uint64_t)255;
  m->live += bytes;
  return a;
}

static int find(pe_memory *m, uint64_t addr) {
  if (m->last < m->n && addr >= m->r[m->last].addr && addr < m->r[m->last].addr + m->r[m->last].size) return m->last;
  int lo = 0, hi = m->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (addr < m->r[mid].addr) hi = mid - 1;
    else if (addr >= m->r[mid].addr + m->r[mid].size) lo = mid + 1;
    else return m->last = mid;
  }
  return -1;
}

bool pe_free(pe_memory *m, uint64_t addr) {
  int i = find(m, addr);
  if (i < 0 || m->r[i].addr != addr) return false;
  m->live -= m->r[i].size;
  free(m->r[i].data);
  memmove(&m->r[i], &m->r[i + 1], (size_t)(m->n - i - 1) * sizeof *m->r);
  m->n--;
  m->last = 0;
  return true;
}

uint8_t *pe_memory_at(pe_memory *m, uint64_t addr, size_t n) {
  int i = find(m, addr);
  if (i < 0 || addr + n > m->r[i].addr + m->r[i].size || addr + n < addr) return NULL;
  return m->r[i].data + (addr - m->r[i].addr);
}

bool pe_memory_region(pe_memory *m, uint64_t addr, pe_region *out) {
  int i = find(m, addr);
  if (i < 0) return false;
  *out = m->r[i];
  return true;
}

bool pe_write(pe_memory *m, uint64_t addr, const void *src, size_t n) {
  uint8_t *p = pe_memory_at(m, addr, n);
  if (!p) return false;
  memcpy(p, src, n);
  return true;
}

bool pe_read(pe_memory *m, void *dst, uint64_t addr, size_t n) {
  uint8_t *p = pe_memory_at(m, addr, n);
  if (!p) return false;
  memcpy(dst, p, n);
  return true;
}

size_t pe_memory_live_bytes(const pe_memory *m) { return m->live; }
