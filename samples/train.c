/*
 * train.c: train a model from C through castor.h (docs/training.md).
 *
 *   train MODEL [X.npy Y.npy] [OUT.safetensors]
 *
 * X: float32 features [n, ...]; Y: int32 class indices [n]. Without them
 * it makes a seeded toy task (the class is the argmax of a fixed random
 * projection of the features) so it runs anywhere. It compiles the
 * training step with Adam, runs 200 steps of 64 samples (of all of them
 * when there are fewer), prints the loss,
 * the loss scale and the skipped steps every 50 steps, and saves the
 * weights. Exits 1 if the loss did not go down.
 */
#include <castor.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int fail(castor_context *ctx, const char *what) {
  fprintf(stderr, "train: %s failed:\n%s", what, castor_context_last_error(ctx));
  return 1;
}

static uint64_t rng = 88172645463325252u;
static float uniform(void) { /* xorshift64 -> [0, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)(rng >> 40) / 16777216.0f;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: train MODEL [X.npy Y.npy] [OUT.safetensors]\n");
    return 1;
  }
  castor_context *ctx;
  castor_model *model;
  castor_program *step;
  castor_context_create(&ctx);
  if (castor_model_load_file(ctx, argv[1], NULL, &model)) return fail(ctx, "loading the model");
  castor_compile_options opts;
  castor_compile_options_init(&opts);
  castor_train_options topts;
  castor_train_options_init(&topts);
  topts.optimizer = "adam";
  if (castor_compile_train(model, &opts, &topts, &step)) return fail(ctx, "compiling the training step");

  /* the shapes: input 0 is [N, features...], output 0 is [N, classes] */
  castor_tensor_info in, out;
  castor_program_input_info(step, 0, &in);
  castor_program_output_info(step, 0, &out);
  int64_t features = 1, classes = out.dims[1];
  for (int r = 1; r < in.rank; r++) features *= in.dims[r];

  castor_tensor *x_all = NULL, *y_all = NULL;
  if (argc >= 4) {
    if (castor_tensor_load_npy(ctx, argv[2], &x_all) || castor_tensor_load_npy(ctx, argv[3], &y_all))
      return fail(ctx, "loading the data");
  } else { /* a toy task: y = argmax(x W) for a fixed random W */
    int64_t n = 4096, xd[] = {n, features}, yd[] = {n};
    castor_tensor_create(ctx, CASTOR_F32, 2, xd, &x_all);
    castor_tensor_create(ctx, CASTOR_I32, 1, yd, &y_all);
    float *x = castor_tensor_data(x_all), w[16][1024];
    int32_t *y = castor_tensor_data(y_all);
    for (int64_t c = 0; c < classes && c < 16; c++)
      for (int64_t f = 0; f < features && f < 1024; f++) w[c][f] = uniform() - 0.5f;
    for (int64_t i = 0; i < n; i++) {
      float best = -1e30f;
      for (int64_t f = 0; f < features; f++) x[i * features + f] = uniform();
      for (int64_t c = 0; c < classes && c < 16; c++) {
        float s = 0;
        for (int64_t f = 0; f < features && f < 1024; f++) s += (x[i * features + f] - 0.5f) * w[c][f];
        if (s > best) best = s, y[i] = (int32_t)c;
      }
    }
  }
  int64_t n = castor_tensor_dims(x_all)[0];
  if (castor_tensor_numel(x_all) != n * features || castor_tensor_numel(y_all) != n ||
      castor_tensor_dtype(y_all) != CASTOR_I32) {
    fprintf(stderr, "train: X must be [n, %lld] float32 and Y [n] int32 class indices\n", (long long)features);
    return 1;
  }

  if (n < 1) {
    fprintf(stderr, "train: X and Y hold no samples\n");
    return 1;
  }
  enum { STEPS = 200 };
  const int64_t batch = n < 64 ? n : 64; /* fewer samples than a batch: one batch of all of them */
  int64_t xd[] = {batch, features}, yd[] = {batch};
  castor_tensor *x, *y, *outs[2] = {NULL, NULL};
  castor_tensor_create(ctx, CASTOR_F32, 2, xd, &x);
  castor_tensor_create(ctx, CASTOR_I32, 1, yd, &y);
  double first = 0, last = 0;
  for (int s = 0; s < STEPS; s++) {
    int64_t start = (int64_t)s * batch % (n - batch + 1);
    memcpy(castor_tensor_data(x), (float *)castor_tensor_data(x_all) + start * features,
           (size_t)(batch * features) * sizeof(float));
    memcpy(castor_tensor_data(y), (int32_t *)castor_tensor_data(y_all) + start, (size_t)batch * sizeof(int32_t));
    castor_tensor *ins[] = {x, y};
    if (castor_program_run(step, ins, 2, outs, 2)) return fail(ctx, "a training step");
    double loss = *(float *)castor_tensor_data(outs[1]);
    if (s < 10) first += loss / 10;
    if (s >= STEPS - 10) last += loss / 10;
    if ((s + 1) % 50 == 0) {
      castor_tensor *scale = NULL, *iters = NULL;
      printf("step %d: loss %.4f", s + 1, loss);
      if (castor_program_get_state(step, "optimizer.loss_scale", &scale) == CASTOR_OK) /* mixed_float16 */
        printf(", loss scale %g", *(float *)castor_tensor_data(scale));
      castor_program_get_state(step, "optimizer.iterations", &iters);
      printf(", skipped %lld\n", (long long)(s + 1 - *(int64_t *)castor_tensor_data(iters)));
      castor_tensor_destroy(scale);
      castor_tensor_destroy(iters);
    }
  }
  if (argc == 3 || argc == 5) {
    if (castor_program_save_weights(step, argv[argc - 1])) return fail(ctx, "saving the weights");
    printf("weights saved to %s\n", argv[argc - 1]);
  }
  printf("mean loss of the first 10 steps %.4f, of the last 10 %.4f\n", first, last);
  castor_tensor_destroy(outs[0]), castor_tensor_destroy(outs[1]);
  castor_tensor_destroy(x), castor_tensor_destroy(y), castor_tensor_destroy(x_all), castor_tensor_destroy(y_all);
  castor_program_destroy(step);
  castor_model_destroy(model);
  castor_context_destroy(ctx);
  return last < first ? 0 : 1;
}
