/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda.c: the CUDA device (cuda.h) over the CUDA Driver API.
 *
 * libcuda.so.1 is opened with dlopen on first use and its entry points are
 * looked up into a table declared here (castor's own declarations of the
 * few types and calls it needs, ABI-compatible with cuda.h; versioned
 * symbols such as cuMemAlloc_v2 by their real names), so nothing links
 * against CUDA and every binary runs where there is no GPU.
 *
 * This file is the one adapter between CUresult and castor's diagnostics:
 * every call goes through CU(call, "name"), which reports
 * "cuName failed: CUDA_ERROR_X: description" and fails the operation.
 * Depends on util only; never sees the IR.
 */
#include "runtime/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- castor's declarations of the Driver API subset ---- */

typedef int CUresult; /* CUDA_SUCCESS == 0 */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

enum {
  CUDA_ERROR_NO_DEVICE = 100,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_EVENT_DEFAULT = 0,
};

#define CUDA_API(X)                                                                               \
  X(cuInit, "cuInit", (unsigned))                                                                \
  X(cuDeviceGetCount, "cuDeviceGetCount", (int *))                                               \
  X(cuDeviceGet, "cuDeviceGet", (CUdevice *, int))                                               \
  X(cuDeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))                                 \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *, int, CUdevice))                        \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))               \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))                       \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                                             \
  X(cuCtxSynchronize, "cuCtxSynchronize", (void))                                                \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx", (CUmodule *, const void *, unsigned, int *, void **)) \
  X(cuModuleUnload, "cuModuleUnload", (CUmodule))                                                \
  X(cuModuleGetFunction, "cuModuleGetFunction", (CUfunction *, CUmodule, const char *))          \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", (CUfunction, int, int))                            \
  X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                                        \
  X(cuMemFree, "cuMemFree_v2", (CUdeviceptr))                                                    \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr, const void *, size_t))                        \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *, CUdeviceptr, size_t))                              \
  X(cuLaunchKernel, "cuLaunchKernel",                                                            \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, \
     void **, void **))                                                                          \
  X(cuEventCreate, "cuEventCreate", (CUevent *, unsigned))                                       \
  X(cuEventRecord, "cuEventRecord", (CUevent, CUstream))                                         \
  X(cuEventSynchronize, "cuEventSynchronize", (CUevent))                                         \
  X(cuEventElapsedTime, "cuEventElapsedTime", (float *, CUevent, CUevent))                       \
  X(cuEventDestroy, "cuEventDestroy_v2", (CUevent))                                              \
  X(cuGetErrorName, "cuGetErrorName", (CUresult, const char **))                                 \
  X(cuGetErrorString, "cuGetErrorString", (CUresult, const char **))

static struct {
#define FIELD(id, sym, args) CUresult(*id) args;
  CUDA_API(FIELD)
#undef FIELD
  void *lib;
  bool emulated;   /* CASTOR_CUDA_EMULATE: the PTX emulator, not libcuda */
  char dlerr[512]; /* why loading failed, "" if it did not */
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

/* The library the Driver API comes from: libcuda.so.1, or under
 * CASTOR_CUDA_EMULATE the test suite's PTX emulator (tests/ptxemu), which
 * exports the same symbols; "1" names the build tree's copy, anything
 * else is its path. The emulator is never linked into castor: only this
 * name changes, and everything below runs as it does on a GPU. */
static const char *drv_library(bool *emulated) {
  const char *e = getenv("CASTOR_CUDA_EMULATE");
  *emulated = e && e[0] && strcmp(e, "0");
  if (!*emulated) return "libcuda.so.1";
  if (strcmp(e, "1")) return e;
#ifdef CASTOR_PTXEMU_LIB
  return CASTOR_PTXEMU_LIB;
#else
  return NULL;
#endif
}

static void drv_load(void) {
  bool emulated;
  const char *lib = drv_library(&emulated);
  drv.emulated = emulated;
  if (!lib) {
    snprintf(drv.dlerr, sizeof drv.dlerr,
             "CASTOR_CUDA_EMULATE=1, but this castor was built without the test suite's PTX emulator; set "
             "CASTOR_CUDA_EMULATE to the path of libcastor_ptxemu.so");
    return;
  }
  drv.lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!drv.lib) {
    const char *m = dlerror();
    snprintf(drv.dlerr, sizeof drv.dlerr, "%s", m ? m : "dlopen failed");
    return;
  }
#define LOOKUP(id, sym, args)                                                  \
  if (!drv.dlerr[0]) {                                                        \
    void *f = dlsym(drv.lib, sym);                                            \
    if (!f) snprintf(drv.dlerr, sizeof drv.dlerr, "%s lacks %s", lib, sym);        \
    else memcpy(&drv.id, &f, sizeof f);                                       \
  }
  CUDA_API(LOOKUP)
#undef LOOKUP
}

static const char *cu_name(CUresult r) {
  const char *s = NULL;
  if (drv.cuGetErrorName && drv.cuGetErrorName(r, &s) == 0 && s) return s;
  return "CUDA_ERROR_UNKNOWN";
}

static bool cu_check(CUresult r, const char *call, diag_sink *d) {
  if (r == 0) return true;
  const char *desc = NULL;
  if (!drv.cuGetErrorString || drv.cuGetErrorString(r, &desc) != 0 || !desc) desc = "no description";
  diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "%s failed: %s: %s", call, cu_name(r), desc);
  return false;
}
#define CU(call, name) cu_check(drv.call, name, d)

/* ---- devices ---- */

struct rt_cuda_device {
  CUdevice dev;
  CUcontext ctx;
  int index, cc, smem_optin;
  char name[256];
};

static bool driver_ready(diag_sink *d) {
  pthread_once(&drv_once, drv_load);
  if (drv.dlerr[0] && drv.emulated) {
    diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "no PTX emulator: %s (CASTOR_CUDA_EMULATE is set)", drv.dlerr);
    return false;
  }
  if (drv.dlerr[0]) {
    diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0},
                    "no CUDA driver: cannot load libcuda.so.1 (%s); the cuda target needs an NVIDIA GPU and driver",
                    drv.dlerr);
    return false;
  }
  CUresult r = drv.cuInit(0);
  if (r == CUDA_ERROR_NO_DEVICE) {
    diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "no CUDA device: cuInit reports %s", cu_name(r));
    return false;
  }
  return cu_check(r, "cuInit", d);
}

rt_cuda_device *rt_cuda_device_open(int index, diag_sink *d) {
  if (index < 0) {
    const char *env = getenv("CASTOR_DEVICE");
    char *end = NULL;
    long v = env && env[0] ? strtol(env, &end, 10) : 0;
    if (env && env[0] && (*end || v < 0 || v > 1024)) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                      "CASTOR_DEVICE must be a device index (0, 1, ...), got '%s'", env);
      return NULL;
    }
    index = (int)v;
  }
  if (!driver_ready(d)) return NULL;
  int count = 0;
  if (!CU(cuDeviceGetCount(&count), "cuDeviceGetCount")) return NULL;
  if (count == 0) {
    diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "no CUDA device: the driver reports none");
    return NULL;
  }
  if (index >= count) {
    diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "CUDA device %d does not exist (%d device%s, 0-%d)", index,
                    count, count == 1 ? "" : "s", count - 1);
    return NULL;
  }
  rt_cuda_device *dev = xcalloc(1, sizeof *dev);
  dev->index = index;
  int major = 0, minor = 0;
  if (!CU(cuDeviceGet(&dev->dev, index), "cuDeviceGet") ||
      !CU(cuDeviceGetName(dev->name, (int)sizeof dev->name, dev->dev), "cuDeviceGetName") ||
      !CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev->dev), "cuDeviceGetAttribute") ||
      !CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev->dev), "cuDeviceGetAttribute") ||
      !CU(cuDeviceGetAttribute(&dev->smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev->dev),
          "cuDeviceGetAttribute") ||
      !CU(cuDevicePrimaryCtxRetain(&dev->ctx, dev->dev), "cuDevicePrimaryCtxRetain")) {
    free(dev);
    return NULL;
  }
  dev->cc = major * 10 + minor;
  if (!CU(cuCtxSetCurrent(dev->ctx), "cuCtxSetCurrent")) {
    drv.cuDevicePrimaryCtxRelease(dev->dev);
    free(dev);
    return NULL;
  }
  return dev;
}

void rt_cuda_device_close(rt_cuda_device *dev) {
  if (!dev) return;
  drv.cuDevicePrimaryCtxRelease(dev->dev);
  free(dev);
}

const char *rt_cuda_device_name(const rt_cuda_device *dev) { return dev->name; }
int rt_cuda_device_cc(const rt_cuda_device *dev) { return dev->cc; }
void rt_cuda_device_sm(const rt_cuda_device *dev, char *out, size_t len) {
  /* sm_90a: the arch-specific features are opted into by name; castor's
   * kernels need only sm_90 */
  snprintf(out, len, "sm_%d", dev->cc);
}

/* ---- programs ---- */

void rt_cuda_program_destroy(rt_cuda_program *p) {
  if (!p) return;
  rt_program_destroy(p->desc);
  if (p->arena) arena_destroy(p->arena);
  free(p);
}

int64_t rt_cuda_launch_grid_x(const rt_cuda_launch *l, int64_t batch) {
  int64_t rows = l->batched ? batch : l->rows_fixed, per = l->units_per_block > 0 ? l->units_per_block : 1;
  int64_t units = rows * (l->units_per_row > 0 ? l->units_per_row : 1);
  int64_t g = (units + per - 1) / per;
  if (l->max_grid_x > 0 && g > l->max_grid_x) g = l->max_grid_x;
  return g < 1 ? 1 : g;
}

struct rt_cuda_module {
  rt_cuda_device *dev;
  const rt_cuda_program *p;
  CUmodule mod;
  CUfunction *fns;
  CUdeviceptr *consts; /* per buffer: constants' device copies (0 for others) */
  CUdeviceptr *ins, *outs, ws;
  CUdeviceptr *states; /* per state of a training program: resident between runs */
  int64_t cap_batch;   /* the batch the io and workspace allocations hold */
  CUdeviceptr *addr;   /* per buffer, for the current batch */
};

static int64_t tensor_bytes(const rt_program *p, const rt_tensor_desc *t, int64_t batch) {
  const rt_buffer *b = &p->buffers[t->buffer];
  return b->bytes_per_row * batch + b->bytes_fixed;
}

static int64_t align256(int64_t x) { return (x + 255) & ~(int64_t)255; }

static int64_t slot_offset(const rt_program *p, int s, int64_t batch) {
  int64_t off = 0;
  for (int i = 0; i < s; i++) off = align256(off + p->slots[i].bytes_per_row * batch + p->slots[i].bytes_fixed);
  return off;
}

static void free_io(rt_cuda_module *m) {
  const rt_program *p = m->p->desc;
  for (int i = 0; i < p->n_inputs; i++)
    if (m->ins[i]) drv.cuMemFree(m->ins[i]), m->ins[i] = 0;
  for (int i = 0; i < p->n_outputs; i++)
    if (m->outs[i]) drv.cuMemFree(m->outs[i]), m->outs[i] = 0;
  if (m->ws) drv.cuMemFree(m->ws), m->ws = 0;
  m->cap_batch = 0;
}

static bool alloc(CUdeviceptr *out, int64_t bytes, const char *what, diag_sink *d) {
  if (bytes < 256) bytes = 256;
  CUresult r = drv.cuMemAlloc(out, (size_t)bytes);
  if (r == 0) return true;
  *out = 0;
  diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "cuMemAlloc failed: %s: cannot allocate %lld bytes for %s",
                  cu_name(r), (long long)bytes, what);
  return false;
}

/* Makes the io and workspace allocations hold `batch` rows and fills addr. */
static bool ensure_batch(rt_cuda_module *m, int64_t batch, diag_sink *d) {
  const rt_program *p = m->p->desc;
  if (batch > m->cap_batch) {
    free_io(m);
    for (int i = 0; i < p->n_inputs; i++)
      if (!alloc(&m->ins[i], tensor_bytes(p, &p->inputs[i], batch), p->inputs[i].name, d)) return false;
    for (int i = 0; i < p->n_outputs; i++)
      if (!alloc(&m->outs[i], tensor_bytes(p, &p->outputs[i], batch), p->outputs[i].name, d)) return false;
    if (!alloc(&m->ws, slot_offset(p, p->n_slots, batch), "the workspace", d)) return false;
    m->cap_batch = batch;
  }
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    switch (buf->kind) {
    case RT_BUF_CONST: m->addr[b] = m->consts[b]; break;
    case RT_BUF_INPUT: m->addr[b] = m->ins[buf->index]; break;
    case RT_BUF_OUTPUT: m->addr[b] = m->outs[buf->index]; break;
    case RT_BUF_SCRATCH: m->addr[b] = m->ws + (CUdeviceptr)slot_offset(p, buf->index, batch); break;
    case RT_BUF_STATE: m->addr[b] = m->states[buf->index]; break;
    }
  }
  return true;
}

rt_cuda_module *rt_cuda_module_load(rt_cuda_device *dev, const rt_cuda_program *p, diag_sink *d) {
  if (!CU(cuCtxSetCurrent(dev->ctx), "cuCtxSetCurrent")) return NULL;
  rt_cuda_module *m = xcalloc(1, sizeof *m);
  const rt_program *desc = p->desc;
  m->dev = dev, m->p = p;
  m->fns = xcalloc((size_t)p->n_launches + 1, sizeof *m->fns);
  m->consts = xcalloc((size_t)desc->n_buffers + 1, sizeof *m->consts);
  m->addr = xcalloc((size_t)desc->n_buffers + 1, sizeof *m->addr);
  m->ins = xcalloc((size_t)desc->n_inputs + 1, sizeof *m->ins);
  m->outs = xcalloc((size_t)desc->n_outputs + 1, sizeof *m->outs);
  m->states = xcalloc((size_t)desc->n_states + 1, sizeof *m->states);
  char errlog[8192] = "", infolog[4096] = "";
  int opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {errlog, (void *)(uintptr_t)sizeof errlog, infolog, (void *)(uintptr_t)sizeof infolog};
  CUresult r = drv.cuModuleLoadDataEx(&m->mod, p->ptx, 4, opts, vals);
  if (r != 0) {
    const char *desc_s = NULL;
    if (drv.cuGetErrorString(r, &desc_s) != 0 || !desc_s) desc_s = "no description";
    errlog[sizeof errlog - 1] = 0;
    diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "cuModuleLoadDataEx failed: %s: %s (%s, %s)%s%s", cu_name(r),
                    desc_s, p->sm, dev->name, errlog[0] ? "\nJIT error log:\n" : "", errlog);
    m->mod = NULL;
    goto fail;
  }
  for (int i = 0; i < p->n_launches; i++) {
    const rt_cuda_launch *l = &p->launches[i];
    if (!CU(cuModuleGetFunction(&m->fns[i], m->mod, l->name), "cuModuleGetFunction")) goto fail;
    if (l->shared_bytes > 48 * 1024) {
      if (l->shared_bytes > dev->smem_optin) {
        diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0}, "kernel %s needs %d bytes of shared memory; %s allows %d",
                        l->name, l->shared_bytes, dev->name, dev->smem_optin);
        goto fail;
      }
      if (!CU(cuFuncSetAttribute(m->fns[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, l->shared_bytes),
              "cuFuncSetAttribute"))
        goto fail;
    }
  }
  for (int b = 0; b < desc->n_buffers; b++) {
    const rt_buffer *buf = &desc->buffers[b];
    if (buf->kind != RT_BUF_CONST) continue;
    if (!alloc(&m->consts[b], buf->bytes_fixed, "a constant", d) ||
        (buf->bytes_fixed > 0 && !CU(cuMemcpyHtoD(m->consts[b], buf->data, (size_t)buf->bytes_fixed), "cuMemcpyHtoD")))
      goto fail;
  }
  /* a training program's states: device memory from here on, initialized
   * as the CPU's (rt_state_init); only the state accessors copy them */
  for (int i = 0; i < desc->n_states; i++) {
    int64_t n = rt_state_bytes(desc, i);
    void *init = xmalloc((size_t)n + 1);
    rt_state_init(desc, i, init);
    bool ok = alloc(&m->states[i], n, desc->states[i].t.name, d) &&
              (n == 0 || CU(cuMemcpyHtoD(m->states[i], init, (size_t)n), "cuMemcpyHtoD"));
    free(init);
    if (!ok) goto fail;
  }
  return m;
fail:
  rt_cuda_module_unload(m);
  return NULL;
}

void rt_cuda_module_unload(rt_cuda_module *m) {
  if (!m) return;
  drv.cuCtxSetCurrent(m->dev->ctx);
  free_io(m);
  for (int b = 0; b < m->p->desc->n_buffers; b++)
    if (m->consts[b]) drv.cuMemFree(m->consts[b]);
  for (int i = 0; i < m->p->desc->n_states; i++)
    if (m->states[i]) drv.cuMemFree(m->states[i]);
  if (m->mod) drv.cuModuleUnload(m->mod);
  free(m->fns), free(m->consts), free(m->addr), free(m->ins), free(m->outs), free(m->states);
  free(m);
}

static bool launch_all(rt_cuda_module *m, int64_t batch, diag_sink *d) {
  const rt_cuda_program *p = m->p;
  CUdeviceptr args[64];
  void *params[65];
  for (int i = 0; i < p->n_launches; i++) {
    const rt_cuda_launch *l = &p->launches[i];
    if (l->batched && batch == 0) continue; /* no rows: an empty batch runs nothing */
    CASTOR_ASSERT(l->n_args <= 64);
    params[0] = &batch;
    for (int a = 0; a < l->n_args; a++) args[a] = m->addr[l->args[a]], params[a + 1] = &args[a];
    int64_t gx = rt_cuda_launch_grid_x(l, batch);
    if (gx > 0x7fffffff) {
      diag_error_kind(d, DIAG_KIND_DEVICE, (diag_loc){0},
                      "kernel %s: batch %lld needs %lld blocks, more than a grid holds", l->name, (long long)batch,
                      (long long)gx);
      return false;
    }
    CUresult r = drv.cuLaunchKernel(m->fns[i], (unsigned)gx, (unsigned)(l->grid_y > 0 ? l->grid_y : 1), 1,
                                    (unsigned)l->block, 1, 1, (unsigned)l->shared_bytes, NULL, params, NULL);
    if (r != 0) {
      char what[256];
      snprintf(what, sizeof what, "cuLaunchKernel (%s)", l->name);
      return cu_check(r, what, d);
    }
  }
  return true;
}

static bool copy_in(rt_cuda_module *m, int64_t batch, const void *const *inputs, diag_sink *d) {
  const rt_program *p = m->p->desc;
  for (int i = 0; i < p->n_inputs; i++) {
    int64_t n = tensor_bytes(p, &p->inputs[i], batch);
    if (n && !CU(cuMemcpyHtoD(m->ins[i], inputs[i], (size_t)n), "cuMemcpyHtoD")) return false;
  }
  return true;
}

static bool copy_out(rt_cuda_module *m, int64_t batch, void *const *outputs, diag_sink *d) {
  const rt_program *p = m->p->desc;
  if (!CU(cuCtxSynchronize(), "cuCtxSynchronize")) return false;
  for (int i = 0; i < p->n_outputs; i++) {
    int64_t n = tensor_bytes(p, &p->outputs[i], batch);
    if (n && !CU(cuMemcpyDtoH(outputs[i], m->outs[i], (size_t)n), "cuMemcpyDtoH")) return false;
  }
  return true;
}

bool rt_cuda_run(rt_cuda_module *m, int64_t batch, const void *const *inputs, void *const *outputs,
                 diag_sink *d) {
  if (batch < 0) batch = 0;
  /* batch 0: the buffers of batch 1, the copies of 0 rows, no batched launch (launch_all) */
  return CU(cuCtxSetCurrent(m->dev->ctx), "cuCtxSetCurrent") && ensure_batch(m, batch < 1 ? 1 : batch, d) &&
         copy_in(m, batch, inputs, d) && launch_all(m, batch, d) && copy_out(m, batch, outputs, d);
}

static bool state_index_ok(const rt_cuda_module *m, int i, diag_sink *d) {
  if (i >= 0 && i < m->p->desc->n_states) return true;
  diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "state index %d is outside 0..%d", i,
                  m->p->desc->n_states - 1);
  return false;
}

bool rt_cuda_state_read(rt_cuda_module *m, int i, void *dst, diag_sink *d) {
  if (!state_index_ok(m, i, d)) return false;
  int64_t n = rt_state_bytes(m->p->desc, i);
  return CU(cuCtxSetCurrent(m->dev->ctx), "cuCtxSetCurrent") && CU(cuCtxSynchronize(), "cuCtxSynchronize") &&
         (n == 0 || CU(cuMemcpyDtoH(dst, m->states[i], (size_t)n), "cuMemcpyDtoH"));
}

bool rt_cuda_state_write(rt_cuda_module *m, int i, const void *src, diag_sink *d) {
  if (!state_index_ok(m, i, d)) return false;
  int64_t n = rt_state_bytes(m->p->desc, i);
  return CU(cuCtxSetCurrent(m->dev->ctx), "cuCtxSetCurrent") && CU(cuCtxSynchronize(), "cuCtxSynchronize") &&
         (n == 0 || CU(cuMemcpyHtoD(m->states[i], src, (size_t)n), "cuMemcpyHtoD"));
}

bool rt_cuda_time(rt_cuda_module *m, int64_t batch, const void *const *inputs, void *const *outputs,
                  int warmup, int iters, double *out_ms, diag_sink *d) {
  if (batch < 1) batch = 1;
  if (!CU(cuCtxSetCurrent(m->dev->ctx), "cuCtxSetCurrent") || !ensure_batch(m, batch, d) ||
      !copy_in(m, batch, inputs, d))
    return false;
  CUevent start = NULL, stop = NULL;
  bool ok = CU(cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate") &&
            CU(cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int i = 0; ok && i < warmup; i++) ok = launch_all(m, batch, d);
  ok = ok && CU(cuCtxSynchronize(), "cuCtxSynchronize");
  for (int i = 0; ok && i < iters; i++) {
    float ms = 0;
    ok = CU(cuEventRecord(start, NULL), "cuEventRecord") && launch_all(m, batch, d) &&
         CU(cuEventRecord(stop, NULL), "cuEventRecord") && CU(cuEventSynchronize(stop), "cuEventSynchronize") &&
         CU(cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    out_ms[i] = ms;
  }
  if (ok && outputs) ok = copy_out(m, batch, outputs, d);
  if (start) drv.cuEventDestroy(start);
  if (stop) drv.cuEventDestroy(stop);
  return ok;
}
