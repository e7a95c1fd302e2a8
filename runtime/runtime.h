/* SPDX-License-Identifier: Apache-2.0 */
/*
 * runtime.h: executes compiled programs. The runtime never sees the IR: a
 * program is a list of kernel launches over a static buffer plan, built by
 * codegen (JIT) or linked into an AOT executable.
 *
 * Kernel ABI: void kernel(char *const *bufs, int64_t batch, int64_t row0,
 * int64_t row1, int64_t col0, int64_t col1, void *scratch). bufs is the
 * program's buffer table (indices baked into the kernel), or, for a launch
 * with n_args > 0, a table of the launch's own buffers (bufs[args[0]], ...,
 * bufs[args[n_args-1]]), so that one kernel body can serve every launch
 * that differs only in its buffers (a deep model's repeated layers); the kernel
 * computes output rows [row0, row1) of its launch, where a launch has
 * `batch` rows if batched and rows_fixed rows otherwise, and, when the
 * launch has cols > 0, only columns [col0, col1) of them (else the col
 * arguments are ignored). Tiles are independent, so a launch may be split
 * across threads, in steps of row_step rows and col_step columns; every
 * output element is computed the same way whatever the split, so results
 * do not depend on the number of threads. scratch is private to the call:
 * scratch_bytes, 64-byte aligned.
 *
 * Buffer plan: constants point at weight data; inputs and outputs at the
 * caller's memory; scratch buffers live in slots of one workspace. A slot's
 * size is max over its buffers of (bytes_per_row * batch + bytes_fixed); slot
 * offsets are 64-byte aligned prefix sums, so one plan serves every batch.
 */
#ifndef CASTOR_RUNTIME_H
#define CASTOR_RUNTIME_H

#include "util/diag.h"
#include "util/dtype.h"
#include "util/util.h"

/* The runtime's element types: the one dtype table (util/dtype.h). */
typedef dtype_id rt_dtype;

typedef void (*rt_kernel_fn)(char *const *bufs, int64_t batch, int64_t row0, int64_t row1,
                             int64_t col0, int64_t col1, void *scratch);

/* STATE: a training program's persistent state (model variables, optimizer
 * slots, training scalars: rt_state_kind): memory the backend keeps between
 * runs (on the CPU, host memory its exec owns), read and written in place by
 * the kernels (index: into rt_program.states). */
typedef enum rt_buffer_kind { RT_BUF_CONST, RT_BUF_INPUT, RT_BUF_OUTPUT, RT_BUF_SCRATCH, RT_BUF_STATE } rt_buffer_kind;

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
  /* how the launch may be split over threads (the kernel ABI above); kept
   * last so that older static descriptions stay a prefix */
  int64_t cols;          /* > 0: a column range is passed and may be split */
  int64_t col_step;      /* column tiles are multiples of it (0: cols) */
  int64_t row_step;      /* row tiles are multiples of it (0: 1) */
  int64_t scratch_bytes; /* per-call scratch the kernel needs */
  int64_t work_per_row;  /* rough cost of a row, to keep tiny launches on one thread */
  int64_t work_per_row_per_batch; /* more cost of a row per batch row: a reduction over the
                                   * batch (training), whose rows are the result's */
  int64_t row_tile_min;  /* > 0: cut rows first, into tiles of at least this many rows,
                          * and columns only for the tiles still wanted (a GEMM whose
                          * A costs more to pack than its B to read: a conv2d's gather,
                          * which every column tile would redo); 0: columns first */
  const int *args;       /* n_args > 0: the buffers the kernel gets as its table (see above) */
  int n_args;
  /* For profiles (castor run --profile), from codegen: the model layer the
   * kernel computes (its main op's; NULL if none), and the bytes of the
   * buffers it reads and writes, per batch row and fixed. */
  const char *layer;
  int64_t bytes_per_row, bytes_fixed;
  /* convolutional networks: either > 0: the runtime chooses the launch's
   * tiles by their cost (program.c, cost_split) instead of row_tile_min's
   * rule: a tile costs its rows x columns, plus tile_row_cost per row it has
   * (a conv2d's A, gathered again by every column tile) and tile_col_cost
   * per column (its B, read again by every row tile), in units of one row
   * by one column of the tile's own work */
  int64_t tile_row_cost, tile_col_cost;
  /* For profiles and tests: the algorithm a kernel took where there is a
   * choice ("winograd": a conv2d by Winograd F(4x4, 3x3)); NULL: the usual */
  const char *algo;
} rt_launch;

enum { RT_MAX_RANK = TENSOR_MAX_RANK };

typedef struct rt_tensor_desc {
  const char *name;
  rt_dtype dtype;
  int rank;
  int64_t dims[RT_MAX_RANK]; /* dims[0] == -1: the batch dimension */
  int buffer;                /* index into buffers */
  /* integers and booleans: an input that a gather reads as indices
   * (directly or through layout ops) holds values in [-index_limit,
   * index_limit) (> 0; 0: no limit), checked before a run
   * (rt_check_indices); index_user names that gather for the error */
  int64_t index_limit;
  const char *index_user;
  /* integers: an input that a recurrent op's mask reads as sequence
   * lengths (ONNX sequence_lens: the mask t < length) holds values in
   * [0, length_limit] (> 0, the steps; 0: no limit), checked before a run
   * (rt_check_indices); length_user names that op for the error */
  int64_t length_limit;
  const char *length_user;
} rt_tensor_desc;

/* What a state is (the IR's kind= of its variable, ir_state_kind): the
 * model's weights are the TRAINABLE and NONTRAINABLE ones (what the API
 * saves and copies); SLOT and SCALAR are the optimizer's. */
typedef enum rt_state_kind {
  RT_STATE_TRAINABLE,    /* a trainable model weight */
  RT_STATE_NONTRAINABLE, /* a model variable no gradient updates (batch norm's moving statistics) */
  RT_STATE_SLOT,         /* an optimizer slot of one weight */
  RT_STATE_SCALAR,       /* a training scalar: step count, loss scale and its counter, learning rate */
} rt_state_kind;

/* A state buffer: its tensor (dims never batched), its kind, and how it
 * starts: `data` (the loaded weight, in dtype), or every element `init`.
 * Only JIT-compiled training programs have states (AOT emits none, so
 * this struct is not part of the AOT ABI). */
typedef struct rt_state_desc {
  rt_tensor_desc t;
  const void *data;
  double init;
  rt_state_kind kind;
} rt_state_desc;

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
  rt_state_desc *states; /* training programs only */
  int n_states;
  /* convolutional networks: > 0 (codegen's program_images): the program
   * has static shapes, its batch bound to `images` rows, and computes each
   * of them apart: every launch before image_launches has rows_fixed /
   * images rows an image, and row n of every value depends only on row n
   * of the inputs. The runtime then runs those launches one image at a time
   * (rt_program_run_profile: each image's activations stay in cache from
   * one layer to the next, where launch by launch each layer streams the
   * whole batch's through memory); 0: launch by launch */
  int64_t images;
  /* with images: launches [0, image_launches) run by image (> 0), the rest
   * launch by launch on the whole batch (a MobileNet's last 1x1 convs and
   * classifier, which would read their weights once an image). Slots [0,
   * image_slots) hold the buffers that live within those launches: the
   * runtime lays them out for one pass of images (image_chunk) at the
   * start of the workspace and moves their base back by the pass's first
   * image, so that every pass reuses the same cache-warm bytes and a
   * thread's own workspace is just those slots (rt_program_pass_bytes) */
  int image_launches, image_slots;
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
 * NULL lets the runtime allocate one for this call. Uses
 * rt_default_threads() threads. */
bool rt_program_run(const rt_program *p, int64_t batch, const void *const *inputs,
                    void *const *outputs, void *workspace, diag_sink *d);
/* The same on `threads` threads (<= 0: rt_default_threads()): the calling
 * thread and workers of the runtime's process-wide pool (threadpool.c).
 * The results are bit-identical for every thread count. */
bool rt_program_run_threads(const rt_program *p, int threads, int64_t batch,
                            const void *const *inputs, void *const *outputs, void *workspace,
                            diag_sink *d);
/* The same for a program with state: states[i] is state i's memory
 * (rt_state_bytes), which the run reads and updates in place. */
bool rt_program_run_state(const rt_program *p, int threads, int64_t batch, const void *const *inputs,
                          void *const *outputs, void *const *states, void *workspace, diag_sink *d);
/* How many workspaces (each rt_program_workspace_bytes) a run on `threads`
 * threads (<= 0: rt_default_threads()) uses: one, or one a thread when it
 * runs by image (rt_program.images; program.c). */
int rt_program_workspaces(const rt_program *p, int threads);
/* The bytes of the workspaces past the first of a run by image (each
 * thread's passes: slots [0, image_slots) laid out for one pass); 0 for a
 * program that does not run by image. */
int64_t rt_program_pass_bytes(const rt_program *p);
/* Whether a run of p goes by image (its first image_launches launches). */
bool rt_program_by_image(const rt_program *p);
/* Kernel timing (castor run --profile). A run given a profile reads the
 * monotonic clock around each launch and around the whole run and appends
 * one event for each; a run without one (the default) reads no clock. The
 * events of several runs accumulate. A launch's event also says how it was
 * split (n_row x n_col tiles over n_threads threads) and the CPU time of
 * its tiles (CLOCK_THREAD_CPUTIME_ID around each tile): cpu_ns summed over
 * every thread, cpu_max_ns the busiest thread's. They change far less with
 * the machine's load than the wall time: cpu_ns over the same launch's on
 * one thread is the work a split adds (a conv's A gathered once per column
 * tile), and cpu_ns / (threads x cpu_max_ns) the balance of the split.
 * span_ns is the launch's time on its threads had they all been free to
 * start at once (a quiet machine): its tiles' CPU times handed out in
 * order, each to the thread that is free first, as the pool does. */
typedef struct rt_profile_event {
  int launch;       /* index into rt_program.launches; -1: the whole run */
  int64_t start_ns; /* since rt_profile.origin_ns */
  int64_t dur_ns;
  int64_t n_row, n_col; /* the tiles of the launch's split */
  int n_threads;        /* threads that ran at least one tile */
  int64_t cpu_ns, cpu_max_ns, span_ns;
} rt_profile_event;

typedef struct rt_profile {
  VEC(rt_profile_event) events;
  int64_t origin_ns; /* rt_clock_ns() at rt_profile_init */
} rt_profile;

void rt_profile_init(rt_profile *p);
void rt_profile_fini(rt_profile *p);
/* CLOCK_MONOTONIC in nanoseconds. */
int64_t rt_clock_ns(void);
/* rt_program_run_state, timing each launch into prof (NULL: not timed). */
bool rt_program_run_profile(const rt_program *p, int threads, int64_t batch, const void *const *inputs,
                            void *const *outputs, void *const *states, void *workspace, rt_profile *prof,
                            diag_sink *d);
/* The same with n_workspaces workspaces (the first as above): a run by
 * image on several threads gives thread t workspaces[t], or one allocated
 * for the call past n_workspaces (rt_program_workspaces says how many; a
 * caller that runs often keeps them, so that a run touches no fresh
 * pages). */
bool rt_program_run_workspaces(const rt_program *p, int threads, int64_t batch, const void *const *inputs,
                               void *const *outputs, void *const *states, void *const *workspaces, int n_workspaces,
                               rt_profile *prof, diag_sink *d);
/* Bytes of state i; its initial contents into dst (that many bytes). */
int64_t rt_state_bytes(const rt_program *p, int i);
void rt_state_init(const rt_program *p, int i, void *dst);
/* CASTOR_NUM_THREADS if set to a whole number from 1 to RT_MAX_THREADS,
 * else the online CPUs (at most RT_MAX_THREADS). */
int rt_default_threads(void);
/* False, with a DIAG_KIND_INVALID_ARGUMENT error naming the value, when
 * CASTOR_NUM_THREADS is set but not such a number ("abc", "0", "99999999"):
 * checked wherever the default thread count is used (compiling for the CPU
 * and running without an explicit thread count), so a typo is an error, not
 * a silent fallback. */
bool rt_threads_env_check(diag_sink *d);
enum { RT_MAX_THREADS = 1024 };
/* Bytes of constant data (weights, as stored: packed) the program holds. */
int64_t rt_program_const_bytes(const rt_program *p);
/* Largest per-thread kernel scratch of the program. */
int64_t rt_program_scratch_bytes(const rt_program *p);

/* Runtime helpers the JIT must resolve for generated code (name, address),
 * e.g. __truncsfbf2 which Debian 12's libgcc lacks. Terminated by {0}. */
/* Appends the line `castor run` prints for an output: name, dtype, shape
 * and, for f32/f16/bf16, min, max, mean (of the finite values) and the
 * argmax of the first rows, then the NaN and Inf counts if there are any. */
void rt_tensor_summary(str_buf *out, const char *name, rt_dtype dtype, int rank, const int64_t *dims,
                       const void *data);
/* Checks an input's integer elements against its index_limit and
 * length_limit (data of t's dtype, dims with the batch filled in): false
 * with an error naming the input, the first element outside and the
 * gather or recurrent op that reads it. */
bool rt_check_indices(const rt_tensor_desc *t, const int64_t *dims, const void *data, diag_sink *d);
/* Counts NaN, +Inf and -Inf (out[0..2]) of a float tensor; true if any.
 * Integer tensors have none. */
bool rt_tensor_nonfinite(rt_dtype dtype, int rank, const int64_t *dims, const void *data, int64_t out[3]);
/* "3 NaN, 1 +Inf": the non-zero counts of rt_tensor_nonfinite. */
void rt_nonfinite_str(str_buf *out, const int64_t counts[3]);

typedef struct rt_symbol {
  const char *name;
  void (*addr)(void); /* cast to the real type by the JIT (ISO C: a function pointer) */
} rt_symbol;
const rt_symbol *rt_helper_symbols(void);

#endif
