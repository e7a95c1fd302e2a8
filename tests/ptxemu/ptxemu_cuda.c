/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxemu_cuda.c: libcastor_ptxemu.so, the CUDA Driver API calls castor's
 * runtime makes (runtime/cuda.c), answered by the PTX emulator.
 *
 * runtime/cuda.c opens this library instead of libcuda.so.1 when
 * CASTOR_CUDA_EMULATE is set (1: the build tree's copy, else a path), and
 * looks up the same symbols by the same names (cuMemAlloc_v2, ...), so the
 * whole driver path runs unchanged: module load with the JIT error log,
 * function lookup, the large-shared-memory attribute, allocations, copies,
 * the launch list with its parameter layout and geometry, events. Nothing
 * of the emulator is linked into castor.
 *
 * One emulated device: "castor ptxemu (emulated sm_80)", compute capability from
 * $CASTOR_PTXEMU_SM (80 or 90; default 80) and the opt-in shared-memory
 * limit of that GPU (A100: 163 KB, H100: 227 KB). Launches run
 * synchronously under $CASTOR_PTXEMU_ORDER and $CASTOR_PTXEMU_LANDING
 * (ptxemu.h). A failed check fails cuLaunchKernel with
 * CUDA_ERROR_LAUNCH_FAILED, and cuGetErrorString then answers the
 * emulator's message (kernel, line, instruction, thread, what went wrong),
 * which castor's runtime puts in its diagnostic. Launch count and
 * instruction totals go to stderr at exit under CASTOR_PTXEMU_STATS=1.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ptxemu_internal.h"

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  OK = 0,
  ERR_INVALID_VALUE = 1,
  ERR_OUT_OF_MEMORY = 2,
  ERR_NOT_INITIALIZED = 3,
  ERR_INVALID_DEVICE = 101,
  ERR_INVALID_CONTEXT = 201,
  ERR_INVALID_PTX = 218,
  ERR_INVALID_HANDLE = 400,
  ERR_NOT_FOUND = 500,
  ERR_LAUNCH_FAILED = 719,
  JIT_ERROR_LOG_BUFFER = 5,
  JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  ATTR_CC_MAJOR = 75,
  ATTR_CC_MINOR = 76,
  ATTR_SMEM_OPTIN = 97,
  FUNC_ATTR_MAX_DYNAMIC_SHARED = 8,
};

typedef struct emu_fn {
  struct emu_mod *mod;
  int kernel;
  int max_dynamic_smem;
} emu_fn;

typedef struct emu_mod {
  pe_module *m;
  emu_fn **fns;
  int n_fns;
} emu_mod;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pe_memory *mem;
static bool initialized;
static int ctx_token; /* the primary context: its address is the handle */
static _Thread_local char last_msg[4096];
static unsigned long long n_launches;

static int sm(void) {
  const char *s = getenv("CASTOR_PTXEMU_SM");
  return s && !strcmp(s, "90") ? 90 : 80;
}

static CUresult fail_msg(CUresult r, const char *fmt, const char *a) {
  snprintf(last_msg, sizeof last_msg, fmt, a);
  return r;
}

static void stats(void) {
  if (getenv("CASTOR_PTXEMU_STATS")) fprintf(stderr, "ptxemu: %llu launches\n", n_launches);
}

API CUresult cuInit(unsigned flags) {
  last_msg[0] = 0;
  if (flags) return ERR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  if (!mem) mem = pe_memory_create(), atexit(stats);
  initialized = true;
  pthread_mutex_unlock(&lock);
  return OK;
}

API CUresult cuDeviceGetCount(int *n) {
  last_msg[0] = 0;
  if (!initialized) return ERR_NOT_INITIALIZED;
  *n = 1;
  return OK;
}

API CUresult cuDeviceGet(int *dev, int index) {
  last_msg[0] = 0;
  if (index != 0) return ERR_INVALID_DEVICE;
  *dev = 0;
  return OK;
}

API CUresult cuDeviceGetName(char *name, int len, int dev) {
  last_msg[0] = 0;
  if (dev != 0 || len <= 0) return ERR_INVALID_VALUE;
  snprintf(name, (size_t)len, "castor ptxemu (emulated sm_%d)", sm());
  return OK;
}

API CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  last_msg[0] = 0;
  if (dev != 0) return ERR_INVALID_DEVICE;
  switch (attr) {
  case ATTR_CC_MAJOR: *v = sm() / 10; return OK;
  case ATTR_CC_MINOR: *v = sm() % 10; return OK;
  case ATTR_SMEM_OPTIN: *v = sm() == 90 ? 227 * 1024 : 163 * 1024; return OK;
  default: return fail_msg(ERR_INVALID_VALUE, "ptxemu: device attribute %s not emulated", "");
  }
}

API CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  last_msg[0] = 0;
  if (dev != 0) return ERR_INVALID_DEVICE;
  *ctx = &ctx_token;
  return OK;
}
API CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  last_msg[0] = 0; return dev == 0 ? OK : ERR_INVALID_DEVICE; }
API CUresult cuCtxSetCurrent(void *ctx) {
  last_msg[0] = 0; return ctx == &ctx_token || !ctx ? OK : ERR_INVALID_CONTEXT; }
API CUresult cuCtxSynchronize(void) {
  last_msg[0] = 0; return OK; } /* launches are synchronous */

API CUresult cuModuleLoadDataEx(emu_mod **out, const void *image, unsigned n_opts, int *opts, void **vals) {
  last_msg[0] = 0;
  char err[1024];
  pe_module *m = pe_module_load((const char *)image, err, sizeof err);
  if (!m) {
    for (unsigned i = 0; i < n_opts; i++)
      if (opts[i] == JIT_ERROR_LOG_BUFFER) {
        size_t cap = 0;
        for (unsigned j = 0; j < n_opts; j++)
          if (opts[j] == JIT_ERROR_LOG_BUFFER_SIZE_BYTES) cap = (size_t)(uintptr_t)vals[j];
        if (cap) snprintf((char *)vals[i], cap, "%s", err);
      }
    return ERR_INVALID_PTX; /* the message is in the JIT error log */
  }
  emu_mod *em = calloc(1, sizeof *em);
  em->m = m;
  *out = em;
  return OK;
}

API CUresult cuModuleUnload(emu_mod *em) {
  last_msg[0] = 0;
  if (!em) return ERR_INVALID_HANDLE;
  for (int i = 0; i < em->n_fns; i++) free(em->fns[i]);
  free(em->fns);
  pe_module_destroy(em->m);
  free(em);
  return OK;
}

API CUresult cuModuleGetFunction(emu_fn **out, emu_mod *em, const char *name) {
  last_msg[0] = 0;
  if (!em) return ERR_INVALID_HANDLE;
  int k = pe_module_kernel(em->m, name);
  if (k < 0) return fail_msg(ERR_NOT_FOUND, "ptxemu: no kernel named '%s' in the module", name);
  emu_fn *f = calloc(1, sizeof *f);
  f->mod = em, f->kernel = k, f->max_dynamic_smem = 48 * 1024;
  em->fns = realloc(em->fns, (size_t)(em->n_fns + 1) * sizeof *em->fns);
  em->fns[em->n_fns++] = f;
  *out = f;
  return OK;
}

API CUresult cuFuncSetAttribute(emu_fn *f, int attr, int value) {
  last_msg[0] = 0;
  if (!f) return ERR_INVALID_HANDLE;
  if (attr != FUNC_ATTR_MAX_DYNAMIC_SHARED) return fail_msg(ERR_INVALID_VALUE, "ptxemu: function attribute %s not emulated", "");
  if (value < 0 || value > (sm() == 90 ? 227 * 1024 : 163 * 1024)) return ERR_INVALID_VALUE;
  f->max_dynamic_smem = value;
  return OK;
}

/* CASTOR_PTXEMU_FAIL_ALLOC=N: the N-th allocation (from 1) and every one
 * after it fail as out of memory, as a GPU whose memory runs out part way
 * (castor's handling of it is under test, not the emulator's memory) */
static unsigned long long n_allocs;

API CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t bytes) {
  last_msg[0] = 0;
  if (!mem) return ERR_NOT_INITIALIZED;
  if (bytes == 0) return ERR_INVALID_VALUE;
  const char *fail_at = getenv("CASTOR_PTXEMU_FAIL_ALLOC");
  pthread_mutex_lock(&lock);
  unsigned long long k = ++n_allocs;
  if (fail_at && k >= strtoull(fail_at, NULL, 10)) {
    pthread_mutex_unlock(&lock);
    return ERR_OUT_OF_MEMORY;
  }
  uint64_t a = pe_alloc(mem, bytes);
  pthread_mutex_unlock(&lock);
  if (!a) return ERR_OUT_OF_MEMORY;
  *out = a;
  return OK;
}

API CUresult cuMemFree_v2(CUdeviceptr p) {
  last_msg[0] = 0;
  pthread_mutex_lock(&lock);
  bool ok = mem && pe_free(mem, p);
  pthread_mutex_unlock(&lock);
  return ok ? OK : fail_msg(ERR_INVALID_VALUE, "ptxemu: cuMemFree of an address that is not an allocation%s", "");
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  last_msg[0] = 0;
  pthread_mutex_lock(&lock);
  bool ok = mem && pe_write(mem, dst, src, n);
  pthread_mutex_unlock(&lock);
  return ok ? OK : fail_msg(ERR_INVALID_VALUE, "ptxemu: cuMemcpyHtoD outside an allocation%s", "");
}

API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  last_msg[0] = 0;
  pthread_mutex_lock(&lock);
  bool ok = mem && pe_read(mem, dst, src, n);
  pthread_mutex_unlock(&lock);
  return ok ? OK : fail_msg(ERR_INVALID_VALUE, "ptxemu: cuMemcpyDtoH outside an allocation%s", "");
}

API CUresult cuLaunchKernel(emu_fn *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned smem, void *stream, void **params, void **extra) {
  last_msg[0] = 0;
  last_msg[0] = 0;
  if (!f) return ERR_INVALID_HANDLE;
  if (stream || extra || !params) return fail_msg(ERR_INVALID_VALUE, "ptxemu: streams and 'extra' are not emulated%s", "");
  if (smem > (unsigned)f->max_dynamic_smem) {
    snprintf(last_msg, sizeof last_msg,
             "ptxemu: %u bytes of dynamic shared memory, over the function's limit of %d "
             "(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)",
             smem, f->max_dynamic_smem);
    return ERR_INVALID_VALUE;
  }
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  pe_options o;
  pe_options_from_env(&o);
  pthread_mutex_lock(&lock);
  n_launches++;
  bool ok = pe_launch(mem, f->mod->m, f->kernel, grid, block, smem, params, &o, last_msg, sizeof last_msg);
  pthread_mutex_unlock(&lock);
  return ok ? OK : ERR_LAUNCH_FAILED;
}

typedef struct emu_event {
  double t;
} emu_event;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

API CUresult cuEventCreate(emu_event **e, unsigned flags) {
  last_msg[0] = 0;
  (void)flags;
  *e = calloc(1, sizeof **e);
  return OK;
}
API CUresult cuEventRecord(emu_event *e, void *stream) {
  last_msg[0] = 0;
  if (!e || stream) return ERR_INVALID_VALUE;
  e->t = now_ms();
  return OK;
}
API CUresult cuEventSynchronize(emu_event *e) {
  last_msg[0] = 0; return e ? OK : ERR_INVALID_HANDLE; }
API CUresult cuEventElapsedTime(float *ms, emu_event *a, emu_event *b) {
  last_msg[0] = 0;
  if (!a || !b) return ERR_INVALID_HANDLE;
  *ms = (float)(b->t - a->t);
  return OK;
}
API CUresult cuEventDestroy_v2(emu_event *e) {
  last_msg[0] = 0;
  free(e);
  return OK;
}

static const struct { CUresult r; const char *name, *desc; } errors[] = {
    {OK, "CUDA_SUCCESS", "no error"},
    {ERR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {ERR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {ERR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {ERR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {ERR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {ERR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {ERR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {ERR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {ERR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
};

API CUresult cuGetErrorName(CUresult r, const char **s) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].r == r) {
      *s = errors[i].name;
      return OK;
    }
  return ERR_INVALID_VALUE;
}

/* The emulator's own message when it has one: what a real driver cannot
 * tell (which instruction of which kernel failed, and why). */
API CUresult cuGetErrorString(CUresult r, const char **s) {
  if (r != OK && last_msg[0]) {
    *s = last_msg;
    return OK;
  }
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].r == r) {
      *s = errors[i].desc;
      return OK;
    }
  return ERR_INVALID_VALUE;
}
