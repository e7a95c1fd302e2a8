/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compile_time.c: how long castor takes to compile one model for
 * inference and for training, through the public API (castor.h), so that
 * bench/compile/train.sh can put the two side by side.
 *
 *   compile_time MODEL [OPTIMIZER [LOSS]]
 *
 * Loads MODEL once (not timed), then prints one line each:
 *   inference: MS ms (cpu MS ms)    castor_compile (castor run's compile)
 *   train: MS ms (cpu MS ms)        castor_compile_train (the training step)
 *   eval: MS ms (cpu MS ms)         castor_compile_eval (the loss for validation)
 * wall-clock milliseconds of each call (passes, planning, LLVM emission,
 * optimization and machine code, weight packing) and the process's CPU
 * time over it (every thread's: the JIT compiles on several). castor train compiles
 * the step and the evaluation program, so its compile time is train +
 * eval. OPTIMIZER and LOSS default to the model's `compile` statement,
 * else castor's defaults (rmsprop, sparse categorical cross-entropy).
 */
#include <castor.h>
#include <stdio.h>
#include <time.h>

static double now_ms(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: compile_time MODEL [OPTIMIZER [LOSS]]\n");
    return 2;
  }
  castor_context *ctx;
  castor_model *m;
  castor_program *p;
  castor_context_create(&ctx);
  if (castor_model_load_file(ctx, argv[1], NULL, &m) != CASTOR_OK) {
    fputs(castor_context_last_error(ctx), stderr);
    return 1;
  }
  castor_train_options to;
  castor_train_options_init(&to);
  if (argc > 2) to.optimizer = argv[2];
  if (argc > 3) to.loss = argv[3];
  int rc = 0;
  for (int what = 0; what < 3 && rc == 0; what++) {
    double t0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
    castor_status st = what == 0   ? castor_compile(m, NULL, &p)
                       : what == 1 ? castor_compile_train(m, NULL, &to, &p)
                                   : castor_compile_eval(m, NULL, &to, &p);
    double ms = now_ms(CLOCK_MONOTONIC) - t0, cpu = now_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (st != CASTOR_OK) {
      fputs(castor_context_last_error(ctx), stderr);
      rc = 1;
      break;
    }
    printf("%s: %.1f ms (cpu %.1f ms)\n", what == 0 ? "inference" : what == 1 ? "train" : "eval", ms, cpu);
    fflush(stdout);
    castor_program_destroy(p);
  }
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  return rc;
}
