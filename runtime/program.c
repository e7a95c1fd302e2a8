/* SPDX-License-Identifier: Apache-2.0 */
/*
 * program.c: runs a compiled program on the CPU: lays out the scratch
 * slots for the batch, fills the buffer table and runs each launch in
 * order, split into tiles over the thread pool (threadpool.c).
 *
 * Splitting: a launch with cols > 0 (a GEMM) is cut into column tiles
 * first, so threads read disjoint weight panels (what matters at small
 * batch), then into row tiles; others into row tiles. A launch with
 * row_tile_min (a conv2d, whose A gather each column tile would redo) is
 * cut into row tiles of at least that many rows first, then columns; one
 * with tile costs (a conv2d over its pixels) into the tiles whose busiest
 * thread has the least work, the tiles' own costs counted. Tile edges are
 * multiples of the launch's col_step / row_step, and a launch whose work is
 * below PARALLEL_MIN_WORK runs on the calling thread alone. The kernels
 * compute every element the same way whatever the tile, so the split never
 * changes results.
 *
 * By image: a program whose rows are images computed apart (rt_program.
 * images, static shapes) runs its first image_launches launches on one
 * image (or a few small ones: image_chunk), then the next (run_by_image):
 * each layer's output is then still in cache when the next layer reads it
 * (a batch-16 MobileNetV2 streams 77 MB activations launch by launch). The
 * buffers that live within those launches have slots of their own
 * (image_slots, first in the workspace), laid out for one pass and moved
 * back by the pass's first image (pass_table), so every pass reuses the
 * same cache-warm bytes (the whole batch's addresses touched fresh memory
 * at each image: 10-20% of MobileNets' CPU time). The launches after the
 * cut (a MobileNet's last 1x1 convolutions and classifier, whose weights
 * outweigh an image's activations) then run on the whole batch, launch by
 * launch, split over the threads. With at least 2 images a thread each
 * thread takes a contiguous share of the images, in a workspace of its own
 * (just the pass's slots: rt_program_pass_bytes; the first thread uses the
 * caller's), the launches unsplit; with fewer, and in a profiled run, the
 * calling thread runs the passes, each launch split over the threads (a
 * profile's event per launch sums its passes). The same kernels on the
 * same rows: the same bits as launch by launch.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "runtime/threadpool.h"

/* Below this much work (about flops) a launch is not worth waking threads:
 * a wake-up costs a few microseconds. $CASTOR_PARALLEL_MIN_WORK overrides
 * it (tests set 0 to split even tiny launches). */
#define PARALLEL_MIN_WORK ((int64_t)1 << 19)

static int64_t parallel_min_work(void) {
  const char *env = getenv("CASTOR_PARALLEL_MIN_WORK");
  if (env && *env) {
    char *end;
    long long v = strtoll(env, &end, 10);
    if (!*end && v >= 0) return v;
  }
  return PARALLEL_MIN_WORK;
}
/* Tiles per thread: enough to even out a disturbed or slower thread. */
enum { TILES_PER_THREAD = 4 };

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

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > RT_MAX_THREADS ? RT_MAX_THREADS : (int)n;
}

/* CASTOR_NUM_THREADS: 0 when unset or empty, the count when it is a whole
 * number from 1 to RT_MAX_THREADS, -1 otherwise. */
static int env_threads(const char **out_text) {
  const char *env = getenv("CASTOR_NUM_THREADS");
  *out_text = env;
  if (!env || !*env) return 0;
  int64_t v;
  return str_parse_i64(env, 1, RT_MAX_THREADS, &v) ? (int)v : -1;
}

int rt_default_threads(void) {
  const char *text;
  int n = env_threads(&text);
  return n > 0 ? n : online_cpus();
}

bool rt_threads_env_check(diag_sink *d) {
  const char *text;
  if (env_threads(&text) >= 0) return true;
  diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0},
                  "CASTOR_NUM_THREADS is '%s'; it must be a whole number from 1 to %d (or unset: "
                  "every CPU)",
                  text, RT_MAX_THREADS);
  return false;
}

int64_t rt_program_const_bytes(const rt_program *p) {
  int64_t n = 0;
  for (int b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind == RT_BUF_CONST) n += p->buffers[b].bytes_fixed;
  return n;
}

int64_t rt_program_scratch_bytes(const rt_program *p) {
  int64_t n = 0;
  for (int i = 0; i < p->n_launches; i++)
    if (p->launches[i].scratch_bytes > n) n = p->launches[i].scratch_bytes;
  return n;
}

/* One launch cut into n_row x n_col tiles over units of row_step rows and
 * col_step columns. */
typedef struct tiling {
  const rt_launch *l;
  char *const *bufs;
  int64_t batch, row0, rows, cols, rstep, cstep, row_units, col_units, n_row, n_col; /* rows [row0, row0 + rows) */
  /* profiling only (else NULL): each tile's CPU time and the thread that ran it */
  int64_t *tile_cpu;
  const void **tile_thread;
} tiling;

/* A per-thread address: which thread ran a tile, for profiles. */
static _Thread_local char thread_mark;

static int64_t thread_cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Edge e of n even chunks over `units` units of `step`, clamped to `total`. */
static int64_t edge(int64_t e, int64_t n, int64_t units, int64_t step, int64_t total) {
  return min64(e * units / n * step, total);
}

static void run_tile(void *arg, int64_t t, void *scratch) {
  const tiling *g = arg;
  int64_t i = t / g->n_col, j = t % g->n_col;
  int64_t r0 = g->row0 + edge(i, g->n_row, g->row_units, g->rstep, g->rows);
  int64_t r1 = g->row0 + edge(i + 1, g->n_row, g->row_units, g->rstep, g->rows);
  int64_t c0 = g->cols ? edge(j, g->n_col, g->col_units, g->cstep, g->cols) : 0;
  int64_t c1 = g->cols ? edge(j + 1, g->n_col, g->col_units, g->cstep, g->cols) : 0;
  if (!(r1 > r0 && (c1 > c0 || !g->cols))) return;
  if (!g->tile_cpu) {
    g->l->fn(g->bufs, g->batch, r0, r1, c0, c1, scratch);
    return;
  }
  int64_t t0 = thread_cpu_ns();
  g->l->fn(g->bufs, g->batch, r0, r1, c0, c1, scratch);
  g->tile_cpu[t] = thread_cpu_ns() - t0;
  g->tile_thread[t] = &thread_mark;
}

static void run_tiles(tiling *g, int threads, rt_profile_event *ev);

/* Rows [r0, r1) of launch l (r1 < 0: all its rows); ev: the launch's
 * profile event to fill with its split and CPU times, or NULL. */
static void run_launch(const rt_launch *l, char *const *bufs, int64_t batch, int threads, int64_t r0, int64_t r1,
                       rt_profile_event *ev) {
  char *own[16], **table = NULL; /* a launch's own buffer table (n_args > 0) */
  if (l->n_args > 0) {
    table = l->n_args <= 16 ? own : xcalloc((size_t)l->n_args, sizeof *table);
    for (int i = 0; i < l->n_args; i++) table[i] = bufs[l->args[i]];
    bufs = table;
  }
  if (r1 < 0) r0 = 0, r1 = l->batched ? batch : l->rows_fixed;
  tiling g = {l, bufs, batch, r0, r1 - r0, l->cols > 0 ? l->cols : 0, 1, 0, 1, 1, 1, 1, NULL, NULL};
  if (g.rows > 0) run_tiles(&g, threads, ev);
  if (table != own) free(table);
}

/* The split's profile: per thread, the CPU time of the tiles it ran; the
 * span on `threads` free threads. */
static void profile_split(const tiling *g, int threads, rt_profile_event *ev) {
  int64_t n = g->n_row * g->n_col;
  const void *seen[64];
  int64_t busy[64];
  int n_seen = 0;
  ev->n_row = g->n_row, ev->n_col = g->n_col, ev->cpu_ns = 0, ev->cpu_max_ns = 0;
  for (int64_t t = 0; t < n; t++) {
    if (!g->tile_thread[t]) continue; /* an empty tile */
    ev->cpu_ns += g->tile_cpu[t];
    int i = 0;
    while (i < n_seen && seen[i] != g->tile_thread[t]) i++;
    if (i == n_seen) {
      if (n_seen == 64) continue; /* more threads than a profile tells apart: in the sum only */
      seen[n_seen] = g->tile_thread[t], busy[n_seen++] = 0;
    }
    busy[i] += g->tile_cpu[t];
  }
  ev->n_threads = n_seen;
  for (int i = 0; i < n_seen; i++) ev->cpu_max_ns = busy[i] > ev->cpu_max_ns ? busy[i] : ev->cpu_max_ns;
  int64_t *free_at = xcalloc((size_t)threads, sizeof *free_at);
  for (int64_t t = 0; t < n; t++) {
    int first = 0;
    for (int i = 1; i < threads; i++) first = free_at[i] < free_at[first] ? i : first;
    free_at[first] += g->tile_cpu[t];
    ev->span_ns = free_at[first] > ev->span_ns ? free_at[first] : ev->span_ns;
  }
  free(free_at);
}

/* convolutional networks: the tiles of a launch with tile costs
 * (rt_launch.tile_row_cost, tile_col_cost: a conv2d's GEMM over its
 * pixels): of every n_row x n_col with at most `want` tiles, the one whose
 * busiest thread has the least work, counting the tiles it runs (tiles
 * handed out in turn: ceil(tiles / threads) of the largest) and each
 * tile's own cost, rows x columns plus the costs per row and column: a row
 * split reads B again per row tile, a column split gathers A again per
 * column tile. Ties go to fewer tiles. */
static void cost_split(tiling *g, int threads, int64_t want) {
  const rt_launch *l = g->l;
  double best = -1;
  for (int64_t nr = 1; nr <= min64(g->row_units, want); nr++)
    for (int64_t nc = 1; nc <= min64(g->col_units, want / nr); nc++) {
      double rows = (double)min64((g->row_units + nr - 1) / nr * g->rstep, g->rows);
      double cols = (double)min64((g->col_units + nc - 1) / nc * g->cstep, g->cols);
      double turns = (double)((nr * nc + threads - 1) / threads);
      double cost = turns * (rows * cols + (double)l->tile_row_cost * rows + (double)l->tile_col_cost * cols);
      if (best < 0 || cost < best || (cost == best && nr * nc < g->n_row * g->n_col)) {
        best = cost;
        g->n_row = nr, g->n_col = nc;
      }
    }
}

static void run_tiles(tiling *gp, int threads, rt_profile_event *ev) {
  tiling g = *gp;
  const rt_launch *l = g.l;
  g.rstep = l->row_step > 0 ? l->row_step : 1;
  g.cstep = g.cols ? (l->col_step > 0 ? l->col_step : g.cols) : 1;
  g.row_units = (g.rows + g.rstep - 1) / g.rstep;
  g.col_units = g.cols ? (g.cols + g.cstep - 1) / g.cstep : 1;
  int64_t work, row_work = l->work_per_row > 0 ? l->work_per_row : 1, batch_work;
  if (l->work_per_row_per_batch > 0 &&
      (!size_mul_ok(l->work_per_row_per_batch, g.batch, &batch_work) || !size_add_ok(row_work, batch_work, &row_work)))
    row_work = INT64_MAX;
  if (threads > 1 && (row_work == INT64_MAX || !size_mul_ok(g.rows, row_work, &work) || work >= parallel_min_work())) {
    int64_t want = (int64_t)threads * TILES_PER_THREAD;
    if ((l->tile_row_cost > 0 || l->tile_col_cost > 0) && g.cols) {
      cost_split(&g, threads, want);
    } else if (l->row_tile_min > 0 && g.cols) { /* rows first, each tile at least row_tile_min rows */
      int64_t fit = g.rows / l->row_tile_min;
      g.n_row = min64(g.row_units, min64(want, fit > 1 ? fit : 1));
      g.n_col = min64(g.col_units, (want + g.n_row - 1) / g.n_row);
    } else {
      g.n_col = min64(g.col_units, want);
      g.n_row = min64(g.row_units, (want + g.n_col - 1) / g.n_col);
    }
  }
  if (!ev) {
    rt_pool_run(threads, g.n_row * g.n_col, l->scratch_bytes, run_tile, &g);
    return;
  }
  g.tile_cpu = xcalloc((size_t)(g.n_row * g.n_col), sizeof *g.tile_cpu);
  g.tile_thread = xcalloc((size_t)(g.n_row * g.n_col), sizeof *g.tile_thread);
  rt_pool_run(threads, g.n_row * g.n_col, l->scratch_bytes, run_tile, &g);
  profile_split(&g, threads, ev);
  free(g.tile_cpu);
  free(g.tile_thread);
}

/* Whether p runs its first image_launches launches by image (rt_program.
 * images). */
static bool runs_by_image(const rt_program *p) {
  if (p->images < 2 || p->n_states > 0 || p->image_launches < 1 || p->image_launches > p->n_launches) return false;
  for (int li = 0; li < p->image_launches; li++)
    if (p->launches[li].batched || p->launches[li].rows_fixed % p->images != 0) return false; /* (codegen says not) */
  return true;
}

/* Images a pass of the launches by image: as many as keep the largest
 * activation (an input or scratch buffer) of a pass within CHUNK_BYTES,
 * at least one: fewer passes read the weights fewer times
 * (MobileNetV3-Small at 224x224, 0.8 MB a 112x112x16 image: 2 a pass, 12%
 * less CPU time than 1; 4.8 MB MobileNetV2 and 3.2 MB SqueezeNet run best
 * 1 a pass). 0 for a program that does not run by image. */
#define CHUNK_BYTES ((int64_t)2 << 20)

static int64_t image_chunk(const rt_program *p) {
  if (!runs_by_image(p)) return 0;
  int64_t largest = 1;
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    if ((buf->kind == RT_BUF_SCRATCH || buf->kind == RT_BUF_INPUT) && buf->bytes_fixed / p->images > largest)
      largest = buf->bytes_fixed / p->images;
  }
  int64_t chunk = CHUNK_BYTES / largest;
  return chunk < 1 ? 1 : chunk > p->images ? p->images : chunk;
}

/* Slot s's bytes in a run at `batch`, 64-byte aligned: the whole batch's,
 * or, for a slot of the launches by image (chunk > 0), one pass's. */
static bool run_slot_bytes(const rt_program *p, int s, int64_t batch, int64_t chunk, int64_t *out) {
  if (chunk > 0 && s < p->image_slots) { /* static shapes: bytes_fixed holds every image's */
    *out = align64(p->slots[s].bytes_fixed / p->images * chunk);
    return true;
  }
  return slot_bytes(&p->slots[s], batch, out);
}

bool rt_program_workspace_bytes(const rt_program *p, int64_t batch, int64_t *out) {
  int64_t total = 0, chunk = image_chunk(p);
  for (int s = 0; s < p->n_slots; s++) {
    int64_t n;
    if (!run_slot_bytes(p, s, batch, chunk, &n) || !size_add_ok(total, n, &total)) return false;
  }
  *out = total;
  return true;
}

int64_t rt_program_pass_bytes(const rt_program *p) {
  int64_t total = 0, chunk = image_chunk(p), n;
  for (int s = 0; chunk > 0 && s < p->image_slots; s++)
    if (run_slot_bytes(p, s, 0, chunk, &n)) total += n;
  return total;
}

/* The tasks of the by-image launches on `threads` threads: one a thread,
 * each its own images and workspace, when there are at least 2 images a
 * thread; else 1 (the calling thread's passes, each launch split over the
 * threads). */
static int image_tasks(const rt_program *p, int threads) {
  if (threads <= 0) threads = rt_default_threads();
  return p->images >= 2 * (int64_t)threads ? threads : 1;
}

bool rt_program_by_image(const rt_program *p) { return runs_by_image(p); }

int rt_program_workspaces(const rt_program *p, int threads) { return runs_by_image(p) ? image_tasks(p, threads) : 1; }

typedef struct by_image {
  const rt_program *p;
  int64_t batch, tasks, chunk;
  char *const *bufs;    /* the run's buffer table */
  void *const *ws;      /* tasks workspaces: the first the run's */
  const int64_t *slot_off;
  int max_args;
} by_image;

/* A pass's buffer table into out: the run's, but for the buffers of the
 * by-image slots, at their slot in workspace ws moved back by the bytes of
 * the images before the pass's first (i), so that the kernels, which
 * address an image's rows from the buffer's start, find image i at the
 * slot's start: every pass reuses the same (cache-warm) bytes. */
static void pass_table(const by_image *r, const char *ws, int64_t i, char **out) {
  const rt_program *p = r->p;
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    out[b] = r->bufs[b];
    if (buf->kind != RT_BUF_SCRATCH || buf->index >= p->image_slots) continue;
    uintptr_t before = (uintptr_t)(i * ((buf->bytes_per_row * r->batch + buf->bytes_fixed) / p->images));
    out[b] = (char *)((uintptr_t)(ws + r->slot_off[buf->index]) - before);
  }
}

/* Task t (of tasks > 1): images [t * images / tasks, (t + 1) * images /
 * tasks), a pass of chunk images at a time, every launch by image on the
 * pass's rows, in workspace t. */
static void run_image_task(void *arg, int64_t t, void *scratch) {
  const by_image *r = arg;
  const rt_program *p = r->p;
  char **bufs = xcalloc((size_t)p->n_buffers + 1, sizeof *bufs);
  char **table = xcalloc((size_t)r->max_args + 1, sizeof *table);
  int64_t i0 = t * p->images / r->tasks, i1 = (t + 1) * p->images / r->tasks;
  for (int64_t i = i0; i < i1; i += r->chunk) {
    pass_table(r, r->ws[t], i, bufs);
    for (int li = 0; li < p->image_launches; li++) {
      const rt_launch *l = &p->launches[li];
      char **b = bufs;
      if (l->n_args > 0) {
        for (int a = 0; a < l->n_args; a++) table[a] = bufs[l->args[a]];
        b = table;
      }
      int64_t rows = l->rows_fixed / p->images, end = i + r->chunk < i1 ? i + r->chunk : i1;
      l->fn(b, r->batch, i * rows, end * rows, 0, l->cols > 0 ? l->cols : 0, scratch);
    }
  }
  free(table);
  free(bufs);
}

static void acc_event(rt_profile_event *acc, const rt_profile_event *e, int64_t dur) {
  acc->dur_ns += dur, acc->cpu_ns += e->cpu_ns, acc->cpu_max_ns += e->cpu_max_ns, acc->span_ns += e->span_ns;
  acc->n_row = e->n_row, acc->n_col = e->n_col;
  acc->n_threads = e->n_threads > acc->n_threads ? e->n_threads : acc->n_threads;
}

/* The launches by image of a run: on image_tasks tasks, task t in
 * workspaces[t] (the first: the run's; those past n_ws allocated for the
 * call, rt_program_pass_bytes each), or, profiled, on the calling thread,
 * each launch of a pass split over the threads, its events summed over the
 * passes (one a launch, as launch by launch). False (nothing run) when a
 * workspace cannot be allocated. */
static bool run_by_image(const rt_program *p, int threads, int64_t batch, char *const *bufs, const int64_t *slot_off,
                         void *workspace, void *const *workspaces, int n_ws, rt_profile *prof) {
  int64_t tasks = prof ? 1 : image_tasks(p, threads), scratch = 0;
  int max_args = 0;
  for (int li = 0; li < p->image_launches; li++) {
    const rt_launch *l = &p->launches[li];
    if (l->scratch_bytes > scratch) scratch = l->scratch_bytes;
    if (l->n_args > max_args) max_args = l->n_args;
  }
  int64_t chunk = image_chunk(p), pass_bytes = rt_program_pass_bytes(p), per_task = p->images / tasks;
  void **ws = xcalloc((size_t)tasks + 1, sizeof *ws), **own = xcalloc((size_t)tasks + 1, sizeof *own);
  by_image r = {p, batch, tasks, chunk < per_task ? chunk : per_task, bufs, ws, slot_off, max_args};
  bool ok = true;
  ws[0] = workspace;
  for (int64_t t = 1; t < tasks && ok; t++) {
    ws[t] = t < n_ws ? workspaces[t] : NULL;
    if (!ws[t] && pass_bytes > 0 && (uint64_t)pass_bytes <= SIZE_MAX) ws[t] = own[t] = aligned_alloc(64, (size_t)pass_bytes);
    ok = ws[t] != NULL || pass_bytes == 0;
  }
  if (ok && tasks > 1) rt_pool_run((int)tasks, tasks, scratch, run_image_task, &r);
  if (ok && tasks == 1) {
    char **pb = xcalloc((size_t)p->n_buffers + 1, sizeof *pb);
    rt_profile_event *acc = prof ? xcalloc((size_t)p->image_launches, sizeof *acc) : NULL;
    for (int64_t i = 0; i < p->images; i += r.chunk) {
      pass_table(&r, workspace, i, pb);
      int64_t end = i + r.chunk < p->images ? i + r.chunk : p->images;
      for (int li = 0; li < p->image_launches; li++) {
        const rt_launch *l = &p->launches[li];
        int64_t rows = l->rows_fixed / p->images;
        if (!prof) {
          run_launch(&p->launches[li], pb, batch, threads, i * rows, end * rows, NULL);
          continue;
        }
        rt_profile_event split = {0};
        int64_t t0 = rt_clock_ns();
        run_launch(&p->launches[li], pb, batch, threads, i * rows, end * rows, &split);
        if (i == 0) acc[li].start_ns = t0 - prof->origin_ns;
        acc_event(&acc[li], &split, rt_clock_ns() - t0);
      }
    }
    for (int li = 0; prof && li < p->image_launches; li++) {
      acc[li].launch = li;
      vec_push(&prof->events, acc[li]);
    }
    free(acc);
    free(pb);
  }
  for (int64_t t = 0; t < tasks; t++) free(own[t]);
  free(own);
  free(ws);
  return ok;
}

bool rt_program_run(const rt_program *p, int64_t batch, const void *const *inputs,
                    void *const *outputs, void *workspace, diag_sink *d) {
  return rt_program_run_threads(p, 0, batch, inputs, outputs, workspace, d);
}

bool rt_program_run_threads(const rt_program *p, int threads, int64_t batch,
                            const void *const *inputs, void *const *outputs, void *workspace,
                            diag_sink *d) {
  return rt_program_run_state(p, threads, batch, inputs, outputs, NULL, workspace, d);
}

int64_t rt_state_bytes(const rt_program *p, int i) {
  const rt_state_desc *s = &p->states[i];
  return p->buffers[s->t.buffer].bytes_fixed;
}

void rt_state_init(const rt_program *p, int i, void *dst) {
  const rt_state_desc *s = &p->states[i];
  int64_t bytes = rt_state_bytes(p, i), size = dtype_size(s->t.dtype), n = size ? bytes / size : 0;
  if (s->data) {
    memcpy(dst, s->data, (size_t)bytes);
    return;
  }
  for (int64_t e = 0; e < n; e++) dtype_store_double(s->t.dtype, dst, e, s->init);
}

int64_t rt_clock_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

void rt_profile_init(rt_profile *p) {
  memset(p, 0, sizeof *p);
  p->origin_ns = rt_clock_ns();
}

void rt_profile_fini(rt_profile *p) { vec_free(&p->events); }

static void profile_add(rt_profile *prof, int launch, int64_t t0, int64_t t1, const rt_profile_event *split) {
  rt_profile_event e = split ? *split : (rt_profile_event){0};
  e.launch = launch, e.start_ns = t0 - prof->origin_ns, e.dur_ns = t1 - t0;
  vec_push(&prof->events, e);
}

bool rt_program_run_state(const rt_program *p, int threads, int64_t batch, const void *const *inputs,
                          void *const *outputs, void *const *states, void *workspace, diag_sink *d) {
  return rt_program_run_profile(p, threads, batch, inputs, outputs, states, workspace, NULL, d);
}

bool rt_program_run_profile(const rt_program *p, int threads, int64_t batch, const void *const *inputs,
                            void *const *outputs, void *const *states, void *workspace, rt_profile *prof,
                            diag_sink *d) {
  return rt_program_run_workspaces(p, threads, batch, inputs, outputs, states, &workspace, 1, prof, d);
}

bool rt_program_run_workspaces(const rt_program *p, int threads, int64_t batch, const void *const *inputs,
                               void *const *outputs, void *const *states, void *const *workspaces, int n_workspaces,
                               rt_profile *prof, diag_sink *d) {
  void *workspace = n_workspaces > 0 ? workspaces[0] : NULL;
  int64_t run0 = prof ? rt_clock_ns() : 0;
  if (p->n_states > 0 && !states) {
    diag_error(d, (diag_loc){0}, "%s is a training program: it runs with its state", p->name);
    return false;
  }
  if (batch < 0) {
    diag_error(d, (diag_loc){0}, "batch size must be at least 0, got %lld", (long long)batch);
    return false;
  }
  if (batch == 0 && p->n_states > 0) { /* a step's mean over no samples is 0/0 */
    diag_error(d, (diag_loc){0}, "%s is a training step: its batch must hold at least 1 sample, got 0", p->name);
    return false;
  }
  if (threads <= 0 && !rt_threads_env_check(d)) return false;
  if (threads <= 0) threads = rt_default_threads();
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
  int64_t *slot_off = xcalloc((size_t)p->n_slots + 1, sizeof *slot_off), chunk = image_chunk(p);
  for (int s = 0; s < p->n_slots; s++) { /* prefix sums of 64-byte aligned slot sizes */
    int64_t n = 0;
    CASTOR_ASSERT(run_slot_bytes(p, s, batch, chunk, &n));
    slot_off[s + 1] = slot_off[s] + n;
  }
  char **bufs = xcalloc((size_t)p->n_buffers + 1, sizeof *bufs);
  for (int b = 0; b < p->n_buffers; b++) {
    const rt_buffer *buf = &p->buffers[b];
    switch (buf->kind) {
    case RT_BUF_CONST: bufs[b] = (char *)buf->data; break;
    case RT_BUF_INPUT: bufs[b] = (char *)inputs[buf->index]; break;
    case RT_BUF_OUTPUT: bufs[b] = (char *)outputs[buf->index]; break;
    case RT_BUF_SCRATCH: bufs[b] = workspace ? (char *)workspace + slot_off[buf->index] : NULL; break;
    case RT_BUF_STATE: bufs[b] = (char *)states[buf->index]; break;
    }
  }
  int first = 0; /* the launches by image, then the rest on the whole batch */
  if (runs_by_image(p)) {
    if (!run_by_image(p, threads, batch, bufs, slot_off, workspace, workspaces, n_workspaces, prof)) {
      diag_error(d, (diag_loc){0}, "cannot allocate %lld bytes of workspace for a thread's images",
                 (long long)rt_program_pass_bytes(p));
      free(bufs), free(slot_off), free(owned);
      return false;
    }
    first = p->image_launches;
  }
  for (int i = first; i < p->n_launches; i++) {
    if (!prof) {
      run_launch(&p->launches[i], bufs, batch, threads, 0, -1, NULL);
      continue;
    }
    rt_profile_event split = {0};
    int64_t t0 = rt_clock_ns();
    run_launch(&p->launches[i], bufs, batch, threads, 0, -1, &split);
    profile_add(prof, i, t0, rt_clock_ns(), &split);
  }
  free(bufs);
  free(slot_off);
  free(owned);
  if (prof) profile_add(prof, -1, run0, rt_clock_ns(), NULL);
  return true;
}
