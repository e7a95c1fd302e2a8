/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lr_schedule.c: Keras's learning-rate schedules (lr_schedule.h), each the
 * formula of its __call__ in keras/src/optimizers/schedules/
 * learning_rate_schedule.py, step for step in float32 (the dtype of the
 * initial rate's tensor in Keras 3).
 */
#include "runtime/lr_schedule.h"

#include <math.h>
#include <stdlib.h>

/* CosineDecay._decay_function */
static float cosine(const rt_lr_schedule *s, float step, float decay_steps, float from) {
  float completed = step / decay_steps;
  float decayed_cos = 0.5f * (1.0f + cosf((float)M_PI * completed));
  float a = (float)s->alpha;
  return from * ((1.0f - a) * decayed_cos + a);
}

float rt_lr_schedule_at(const rt_lr_schedule *s, int64_t step_i) {
  float step = (float)step_i, initial = (float)s->initial;
  switch (s->kind) {
  case RT_LR_CONSTANT: return initial;
  case RT_LR_EXPONENTIAL: {
    float p = step / (float)s->decay_steps;
    if (s->staircase) p = floorf(p);
    return initial * powf((float)s->decay_rate, p);
  }
  case RT_LR_COSINE: {
    float decay_steps = (float)s->decay_steps;
    if (!s->warmup) return cosine(s, fminf(step, decay_steps), decay_steps, initial);
    float warmup_steps = (float)s->warmup_steps, target = (float)s->warmup_target;
    step = fminf(step, decay_steps + warmup_steps);
    if (step < warmup_steps) /* _warmup_function */
      return (target - initial) * (step / warmup_steps) + initial;
    return cosine(s, step - warmup_steps, decay_steps, target);
  }
  case RT_LR_PIECEWISE: { /* the sum of indicator * value over the ranges, as Keras builds it */
    int n = s->n_boundaries;
    float r = 0;
    r += (float)(step_i <= s->boundaries[0]) * (float)s->values[0];
    r += (float)(step_i > s->boundaries[n - 1]) * (float)s->values[n];
    for (int i = 0; i + 1 < n; i++)
      r += (float)(step_i > s->boundaries[i] && step_i <= s->boundaries[i + 1]) * (float)s->values[i + 1];
    return r;
  }
  }
  return initial;
}

void rt_lr_schedule_fini(rt_lr_schedule *s) {
  if (!s) return;
  free(s->boundaries);
  free(s->values);
  s->boundaries = NULL, s->values = NULL;
}
