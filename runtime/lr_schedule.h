/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lr_schedule.h: Keras's learning-rate schedules (keras/src/optimizers/
 * schedules/learning_rate_schedule.py), evaluated on the host at the
 * optimizer's applied-step count before each training step, in float32 as
 * Keras evaluates them: ExponentialDecay, CosineDecay (with its linear
 * warmup) and PiecewiseConstantDecay. docs/training.md gives the formulas.
 */
#ifndef CASTOR_RUNTIME_LR_SCHEDULE_H
#define CASTOR_RUNTIME_LR_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum rt_lr_kind {
  RT_LR_CONSTANT = 0,
  RT_LR_EXPONENTIAL, /* ExponentialDecay */
  RT_LR_COSINE,      /* CosineDecay */
  RT_LR_PIECEWISE,   /* PiecewiseConstantDecay */
} rt_lr_kind;

typedef struct rt_lr_schedule {
  rt_lr_kind kind;
  double initial;      /* initial_learning_rate (exponential, cosine) */
  int64_t decay_steps; /* exponential, cosine: > 0 */
  double decay_rate;   /* exponential */
  bool staircase;      /* exponential: floor(step / decay_steps) */
  double alpha;        /* cosine: the floor, a fraction of the rate decayed from */
  bool warmup;         /* cosine: warmup_target given */
  double warmup_target;
  int64_t warmup_steps;
  int n_boundaries;    /* piecewise: boundaries[n], values[n + 1] (owned) */
  int64_t *boundaries;
  double *values;
} rt_lr_schedule;

/* The learning rate at `step` applied steps, as a float32 value. */
float rt_lr_schedule_at(const rt_lr_schedule *s, int64_t step);
void rt_lr_schedule_fini(rt_lr_schedule *s);

#endif
