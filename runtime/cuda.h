/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda.h: the CUDA device. Runs a compiled program on an NVIDIA GPU through
 * the CUDA Driver API, loaded at run time with dlopen("libcuda.so.1")
 * through castor's own declarations (cuda.c): castor has no link-time
 * CUDA dependency and runs on machines without a GPU, where opening a
 * device fails with one clear diagnostic. Under CASTOR_CUDA_EMULATE the
 * same calls go to the test suite's PTX emulator instead (tests/ptxemu:
 * a library with libcuda's symbols; 1 = the build tree's, or its path).
 *
 * What codegen hands over (rt_cuda_program) is PTX text plus a launch list
 * over the same static buffer plan the CPU runtime uses (runtime.h): the
 * runtime never sees the IR. Every kernel has the parameters
 *   (i64 batch, ptr arg0, ..., ptr argN-1)
 * where arg i is the device address of buffer args[i] of its launch.
 * Launch geometry: block = (block, 1, 1), dynamic shared memory
 * shared_bytes (over 48 KB through CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
 *   units  = rows * units_per_row      (rows = batch if batched, else rows_fixed)
 *   grid.x = max(1, min(ceil(units / units_per_block), max_grid_x if > 0))
 *   grid.y = grid_y
 * Kernels whose grid.x is capped loop over the rest (grid-stride loops).
 *
 * Every Driver API call is checked; failures are reported by the name of
 * the call and of the CUresult ("cuModuleLoadDataEx failed:
 * CUDA_ERROR_INVALID_PTX: ..."), module loads with the JIT error log.
 * Every error here is DIAG_KIND_DEVICE, except a malformed $CASTOR_DEVICE
 * (DIAG_KIND_INVALID_ARGUMENT).
 */
#ifndef CASTOR_RUNTIME_CUDA_H
#define CASTOR_RUNTIME_CUDA_H

#include "runtime/runtime.h"

typedef struct rt_cuda_launch {
  const char *name; /* the kernel's .entry name in the PTX */
  int block;        /* threads per block */
  int shared_bytes; /* dynamic shared memory per block */
  bool batched;     /* rows = batch, else rows_fixed */
  int64_t rows_fixed;
  int64_t units_per_row, units_per_block, max_grid_x;
  int grid_y;
  int *args; /* buffer indices, in parameter order after the batch */
  int n_args;
  int64_t flops_per_row; /* for reporting */
} rt_cuda_launch;

typedef struct rt_cuda_program {
  rt_program *desc; /* buffers, slots, inputs and outputs (its CPU launches are unused) */
  char *ptx;        /* NUL-terminated PTX module text */
  char sm[16];      /* the architecture the PTX targets, e.g. sm_80 */
  rt_cuda_launch *launches;
  int n_launches;
  arena *arena; /* owns ptx, launches and their strings */
} rt_cuda_program;

void rt_cuda_program_destroy(rt_cuda_program *p); /* NULL is a no-op; destroys desc */

/* grid.x of launch l at this batch (the formula above). */
int64_t rt_cuda_launch_grid_x(const rt_cuda_launch *l, int64_t batch);

/* ---- devices ---- */

typedef struct rt_cuda_device rt_cuda_device;

/* Opens device `index` (< 0: $CASTOR_DEVICE if set, else 0) and creates a
 * context on it. NULL with one diagnostic when there is no driver
 * ("no CUDA driver: cannot load libcuda.so.1 ..."), no device, or the call
 * fails. */
rt_cuda_device *rt_cuda_device_open(int index, diag_sink *d);
void rt_cuda_device_close(rt_cuda_device *dev); /* NULL is a no-op */
const char *rt_cuda_device_name(const rt_cuda_device *dev);
/* Compute capability as major * 10 + minor (90 for an H100). */
int rt_cuda_device_cc(const rt_cuda_device *dev);
/* The PTX architecture for the device: "sm_90". */
void rt_cuda_device_sm(const rt_cuda_device *dev, char *out, size_t len);

/* ---- loaded programs ---- */

typedef struct rt_cuda_module rt_cuda_module;

/* Loads the PTX (JIT-compiled by the driver), looks up every kernel, sets
 * large shared-memory attributes and uploads the constants. p must outlive
 * the module. */
rt_cuda_module *rt_cuda_module_load(rt_cuda_device *dev, const rt_cuda_program *p, diag_sink *d);
void rt_cuda_module_unload(rt_cuda_module *m); /* NULL is a no-op */

/* Runs the program for `batch` rows: host inputs are copied to the device,
 * the kernels launched in order, and the outputs copied back (synchronous).
 * Device buffers for inputs, outputs and the workspace are kept between
 * calls and grown when the batch grows. */
bool rt_cuda_run(rt_cuda_module *m, int64_t batch, const void *const *inputs, void *const *outputs,
                 diag_sink *d);

/* A training program's state i (rt_program.states): kept in device memory
 * from the load on (initialized by rt_state_init), read and updated in
 * place by the kernels of every run; these copy it out to (rt_state_bytes
 * of) host memory or in from it, after the work queued so far. */
bool rt_cuda_state_read(rt_cuda_module *m, int i, void *dst, diag_sink *d);
bool rt_cuda_state_write(rt_cuda_module *m, int i, const void *src, diag_sink *d);

/* Times the kernels alone: copies the inputs once, then runs the launch
 * list `warmup` times and `iters` times, each timed with CUDA events;
 * out_ms[i] receives iteration i's milliseconds (device time, no copies).
 * Leaves the outputs of the last iteration in `outputs` if not NULL. */
bool rt_cuda_time(rt_cuda_module *m, int64_t batch, const void *const *inputs, void *const *outputs,
                  int warmup, int iters, double *out_ms, diag_sink *d);

#endif
