/*
 * runtime.h: executes compiled programs. The runtime never sees the IR: a
 * program is a list of kernel launches over a static buffer plan, built by
 * codegen (JIT) or linked into an AOT executable.
 *
 * Kernel ABI: void kernel(char *const *bufs, int64_t batch, int64_t row0,
 * int64_t row1). bufs is the program's buffer table (indices baked into the
 * kernel); the kernel computes output rows [row0, row1) of its launch, where
 * a launch has `batch` rows if batched and rows_fixed rows otherwise. Rows
 * are independent, so a launch may be split across threads.
 *
 * Buffer plan: constants point at weight data; inputs and outputs at the
 * caller's memory; scratch buffers live in slots of one workspace. A slot's
 * size is max over its buffers of (bytes_per_row * batch + bytes_fixed); slot
 * offsets are 64-byte aligned prefix sums, so one plan serves every batch.
 */
#ifndef CASTOR_RUNTIME_H
#define CASTOR_RUNTIME_H

#include "../util/diag.h"
#include "../util/util.h"

/* Same values as castor_dtype in castor.h and ir_dtype in ir.h. */
typedef enum rt_dtype { RT_F32, RT_F16, RT_BF16, RT_I32, RT_I64, RT_I1 } rt_dtype;
int rt_dtype_size(rt_dtype t);
const char *rt_dtype_name(rt_dtype t);

typedef void (*rt_kernel_fn)(char *const *bufs, int64_t batch, int64_t row0, int64_t row1);

typedef enum rt_buffer_kind { RT_BUF_CONST, RT_BUF_INPUT, RT_BUF_OUTPUT, RT_BUF_SCRATCH } rt_buffer_kind;

typedef struct rt_buffer {
  rt_buffer_kind kind;
  int index;         /* CONST: -; INPUT/OUTPUT: tensor index; SCRATCH: slot */
  const void *data;  /* CONST only */
  int64_t bytes_per_row, bytes_fixed;
} rt_buffer;

typedef struct rt_slot {
  int64_t bytes_per_row, bytes_fixed; /* max over the buffers placed in it */
} rt_slot;

typedef struct rt_launch {
  rt_kernel_fn fn;
  const char *name;  /* kernel symbol, for errors and profiles */
  bool batched;      /* rows = batch, else rows_fixed */
  int64_t rows_fixed;
  int64_t flops_per_row; /* for reporting GFLOP/s */
} rt_launch;

enum { RT_MAX_RANK = 4 };

typedef struct rt_tensor_desc {
  const char *name;
  rt_dtype dtype;
  int rank;
  int64_t dims[RT_MAX_RANK]; /* dims[0] == -1: the batch dimension */
  int buffer;                /* index into buffers */
} rt_tensor_desc;

typedef struct rt_program {
  const char *name;
  rt_buffer *buffers;
  int n_buffers;
  rt_slot *slots;
  int n_slots;
  rt_launch *launches;
  int n_launches;
  rt_tensor_desc *inputs, *outputs;
  int n_inputs, n_outputs;
  /* Whoever built the program (the JIT, say) and how to release it. */
  void *owner;
  void (*owner_destroy)(void *owner);
  arena *arena; /* owns the arrays and strings above */
} rt_program;

void rt_program_destroy(rt_program *p); /* NULL is a no-op; calls owner_destroy */

/* Workspace bytes the scratch slots need at this batch; false on overflow. */
bool rt_program_workspace_bytes(const rt_program *p, int64_t batch, int64_t *out);

/* Runs the program on the CPU for `batch` rows. inputs/outputs are the
 * caller's buffers in the order of p->inputs / p->outputs, sized for the
 * batch. workspace must hold rt_program_workspace_bytes (64-byte aligned);
 * NULL lets the runtime allocate one for this call. */
bool rt_program_run(const rt_program *p, int64_t batch, const void *const *inputs,
                    void *const *outputs, void *workspace, diag_sink *d);

/* Runtime helpers the JIT must resolve for generated code (name, address),
 * e.g. __truncsfbf2 which Debian 12's libgcc lacks. Terminated by {0}. */
typedef struct rt_symbol {
  const char *name;
  void (*addr)(void); /* cast to the real type by the JIT (ISO C: a function pointer) */
} rt_symbol;
const rt_symbol *rt_helper_symbols(void);

#endif
