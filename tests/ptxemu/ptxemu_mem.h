/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxemu_mem.h: host-side access to the emulated global memory, for the
 * interpreter (ptxemu_exec.c).
 */
#ifndef CASTOR_TESTS_PTXEMU_MEM_H
#define CASTOR_TESTS_PTXEMU_MEM_H

#include "ptxemu.h"

typedef struct pe_region {
  uint64_t addr;
  size_t size;
  uint8_t *data;
} pe_region;

/* Host pointer to [addr, addr + n) when it lies inside one allocation,
 * else NULL. */
uint8_t *pe_memory_at(pe_memory *m, uint64_t addr, size_t n);
/* The allocation holding addr, if any. */
bool pe_memory_region(pe_memory *m, uint64_t addr, pe_region *out);

#endif
