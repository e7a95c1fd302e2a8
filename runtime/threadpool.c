/* SPDX-License-Identifier: Apache-2.0 */
/*
 * threadpool.c: the process-wide pool that program.c splits launches over.
 *
 * A job is n tasks handed out from an atomic counter. The caller publishes
 * a job under the lock by bumping `generation`; each worker takes a
 * consistent snapshot of the job under the same lock, so a worker that
 * sleeps through several jobs never acts on a stale one. Only the first
 * threads-1 workers may take part in a job, and only while it is open: a
 * worker joins under the lock (counting `pending` up) and counts it down
 * when the tasks run out; the caller, once it finds no task left, closes
 * the job under the lock and waits for `pending` to reach zero. So the
 * next job cannot start before every participant of this one is done, and
 * the caller never waits for a worker that had not woken up yet: on a
 * loaded machine a small launch would otherwise cost a scheduler wake-up
 * of each helper (measured: the exported transformer at batch 1 on 2
 * threads took a median 1.7 ms against 0.10 ms on 1 thread, at a load
 * average of 20). Waiting spins for SPIN_NS of wall time (launches follow
 * each other closely) and then sleeps on a condition variable, so idle
 * workers cost nothing. The bound is in time, not in pause instructions
 * (a pause takes 3 ns on some x86 cores and over 100 ns on others): a
 * bound of 20,000 pauses kept a worker spinning for about 2 ms after each
 * launch on a Zen 4 guest, through every stretch of launches too small to
 * split, so that a 2-thread training step cost twice its wall time in CPU
 * (bench/results/train-step-2026-11-27-s5.md).
 *
 * Scratch: each worker owns one buffer, grown on demand; the caller's
 * buffer belongs to the pool and is used under `busy`. A caller that finds
 * the pool busy (another thread is running a program) runs its tasks alone
 * with a scratch buffer of its own.
 */
#include "runtime/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/util.h"

enum { MAX_WORKERS = 255 };
/* How long a waiting thread spins before it sleeps: longer than the
 * stretches of unsplit launches between two split ones in a forward pass.
 * 20 us made the exported CNN at batch 64 on 2 threads 20% slower in wall
 * time (0.146 ms against 0.122 ms: each split launch woke a sleeping
 * worker); 200 us and 2 ms time it alike, and 200 us keeps most of the
 * training step's CPU saving (bench/results/train-step-2026-11-27-s5.md). */
#define SPIN_NS ((int64_t)200000)

typedef struct worker {
  pthread_t tid;
  int index;
  uint64_t seen; /* the last generation it acted on (set before it starts) */
  void *scratch;
  int64_t scratch_cap;
} worker;

static struct {
  pthread_mutex_t busy; /* held by the caller running a job */
  pthread_mutex_t lock; /* protects the job fields and the condition variables */
  pthread_cond_t wake, done;
  atomic_uint_fast64_t generation;
  /* the current job */
  int job_workers; /* workers with index < job_workers may take part */
  bool open;       /* workers may still join the job */
  int64_t n_tasks, scratch_bytes;
  rt_task_fn fn;
  void *arg;
  atomic_int_fast64_t next;
  atomic_int pending; /* workers that joined the job and are not done */
  /* workers */
  worker *workers[MAX_WORKERS];
  int n_workers;
  void *scratch; /* the caller's */
  int64_t scratch_cap;
} pool = {.busy = PTHREAD_MUTEX_INITIALIZER,
          .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Spins until *v != seen (true) or for SPIN_NS (false: *v was still `seen`
 * when it last looked). */
static bool spin_while_u64(atomic_uint_fast64_t *v, uint64_t seen) {
  int64_t t0 = now_ns();
  for (int i = 1; atomic_load_explicit(v, memory_order_acquire) == seen; i++) {
    cpu_relax();
    if ((i & 31) == 0 && now_ns() - t0 > SPIN_NS) return false;
  }
  return true;
}

static bool spin_while_pending(void) {
  int64_t t0 = now_ns();
  for (int i = 1; atomic_load_explicit(&pool.pending, memory_order_acquire) > 0; i++) {
    cpu_relax();
    if ((i & 31) == 0 && now_ns() - t0 > SPIN_NS) return false;
  }
  return true;
}

/* Grows *buf to at least n bytes (64-byte aligned); contents not kept. */
static void *scratch_reserve(void **buf, int64_t *cap, int64_t n) {
  if (n <= 0) return *buf;
  if (*cap < n) {
    free(*buf);
    size_t sz = ((size_t)n + 63) & ~(size_t)63;
    *buf = aligned_alloc(64, sz);
    CASTOR_ASSERT(*buf != NULL);
    *cap = (int64_t)sz;
  }
  return *buf;
}

static void run_tasks(rt_task_fn fn, void *arg, int64_t n, void *scratch) {
  for (;;) {
    int64_t t = atomic_fetch_add_explicit(&pool.next, 1, memory_order_relaxed);
    if (t >= n) break;
    fn(arg, t, scratch);
  }
}

static void *worker_main(void *p) {
  worker *w = p;
  uint64_t seen = w->seen;
  for (;;) {
    spin_while_u64(&pool.generation, seen);
    pthread_mutex_lock(&pool.lock);
    while (atomic_load_explicit(&pool.generation, memory_order_relaxed) == seen)
      pthread_cond_wait(&pool.wake, &pool.lock);
    seen = atomic_load_explicit(&pool.generation, memory_order_relaxed);
    bool take_part = pool.open && w->index < pool.job_workers;
    if (take_part) atomic_fetch_add_explicit(&pool.pending, 1, memory_order_relaxed);
    rt_task_fn fn = pool.fn;
    void *arg = pool.arg;
    int64_t n = pool.n_tasks, sb = pool.scratch_bytes;
    pthread_mutex_unlock(&pool.lock);
    if (!take_part) continue;
    run_tasks(fn, arg, n, scratch_reserve(&w->scratch, &w->scratch_cap, sb));
    if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&pool.lock);
      pthread_cond_signal(&pool.done);
      pthread_mutex_unlock(&pool.lock);
    }
  }
  return NULL;
}

/* Starts workers until there are n (or as many as the system gives). */
static int ensure_workers(int n) {
  while (pool.n_workers < n) {
    worker *w = xcalloc(1, sizeof *w);
    w->index = pool.n_workers;
    w->seen = atomic_load_explicit(&pool.generation, memory_order_relaxed);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)1 << 20); /* kernels keep big buffers in scratch, not on the stack */
    int rc = pthread_create(&w->tid, &attr, worker_main, w);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      free(w);
      break;
    }
    pthread_detach(w->tid);
    pool.workers[pool.n_workers++] = w;
  }
  return pool.n_workers;
}

void rt_pool_run(int threads, int64_t n_tasks, int64_t scratch_bytes, rt_task_fn fn, void *arg) {
  if (n_tasks <= 0) return;
  if (pthread_mutex_trylock(&pool.busy) != 0) {
    /* another thread is running a program: do this one alone */
    void *own = NULL;
    int64_t cap = 0;
    void *s = scratch_reserve(&own, &cap, scratch_bytes);
    for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, s);
    free(own);
    return;
  }
  void *s = scratch_reserve(&pool.scratch, &pool.scratch_cap, scratch_bytes);
  int helpers = threads - 1;
  if (helpers > MAX_WORKERS) helpers = MAX_WORKERS;
  if ((int64_t)helpers > n_tasks - 1) helpers = (int)(n_tasks - 1);
  if (helpers > 0) helpers = ensure_workers(helpers) < helpers ? pool.n_workers : helpers;
  if (helpers <= 0) {
    for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, s);
    pthread_mutex_unlock(&pool.busy);
    return;
  }
  pthread_mutex_lock(&pool.lock);
  pool.job_workers = helpers;
  pool.n_tasks = n_tasks;
  pool.scratch_bytes = scratch_bytes;
  pool.fn = fn;
  pool.arg = arg;
  atomic_store_explicit(&pool.next, 0, memory_order_relaxed);
  atomic_store_explicit(&pool.pending, 0, memory_order_relaxed);
  pool.open = true;
  atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);

  run_tasks(fn, arg, n_tasks, s);

  /* no task left to hand out: no worker joins from here on, and the ones
   * that joined (counted under this lock) finish their last task */
  pthread_mutex_lock(&pool.lock);
  pool.open = false;
  pthread_mutex_unlock(&pool.lock);

  if (!spin_while_pending()) {
    pthread_mutex_lock(&pool.lock);
    while (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
  }
  pthread_mutex_unlock(&pool.busy);
}
