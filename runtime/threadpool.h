/* SPDX-License-Identifier: Apache-2.0 */
/*
 * threadpool.h: the runtime's process-wide thread pool (threadpool.c),
 * private to runtime/. One pool serves every program: a run borrows it,
 * the calling thread works too, and workers are started on first need and
 * kept (sleeping after a short spin) for the next launch.
 */
#ifndef CASTOR_RT_THREADPOOL_H
#define CASTOR_RT_THREADPOOL_H

#include <stdint.h>

/* One task: `task` in [0, n_tasks); scratch is the running thread's own
 * (at least the scratch_bytes asked for, 64-byte aligned). */
typedef void (*rt_task_fn)(void *arg, int64_t task, void *scratch);

/* Runs every task once on up to `threads` threads (the caller included)
 * and returns when all are done. Tasks are handed out in order from a
 * shared counter, so which thread runs which task varies: tasks must not
 * depend on it. If another caller is using the pool, runs them all on the
 * calling thread. threads <= 1 or n_tasks == 1: the calling thread alone,
 * with no synchronization beyond one uncontended lock. */
void rt_pool_run(int threads, int64_t n_tasks, int64_t scratch_bytes, rt_task_fn fn, void *arg);

#endif
