/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host.c: JIT-compile a model and run it from C through castor.h.
 *
 *   host MODEL INPUT.npy [OUTPUT.npy]
 *
 * Prints each output's name and shape and its first values; writes the
 * first output to OUTPUT.npy if given. Build: see the README ("Embedding").
 */
#include <castor.h>
#include <stdio.h>

static int fail(castor_context *ctx, const char *what) {
  fprintf(stderr, "host: %s failed:\n%s", what, castor_context_last_error(ctx));
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: host MODEL INPUT.npy [OUTPUT.npy]\n");
    return 1;
  }
  castor_context *ctx;
  castor_model *model;
  castor_program *prog;
  castor_tensor *input, *output = NULL;
  castor_compile_options opts;
  castor_context_create(&ctx);
  castor_compile_options_init(&opts);
  if (castor_model_load_file(ctx, argv[1], NULL, &model)) return fail(ctx, "loading the model");
  if (castor_compile(model, &opts, &prog)) return fail(ctx, "compiling");
  if (castor_tensor_load_npy(ctx, argv[2], &input)) return fail(ctx, "reading the input");
  if (castor_program_run(prog, &input, 1, &output, 1)) return fail(ctx, "running");

  castor_tensor_info info;
  castor_program_output_info(prog, 0, &info);
  const float *y = castor_tensor_data(output);
  printf("%s: %s[", info.name, castor_dtype_name(castor_tensor_dtype(output)));
  for (int r = 0; r < castor_tensor_rank(output); r++)
    printf("%s%lld", r ? "," : "", (long long)castor_tensor_dims(output)[r]);
  printf("] first values:");
  for (int64_t i = 0; i < castor_tensor_numel(output) && i < 5; i++) printf(" %.6g", y[i]);
  printf("\n");
  if (argc > 3 && castor_tensor_save_npy(output, argv[3])) return fail(ctx, "writing the output");

  castor_tensor_destroy(output);
  castor_tensor_destroy(input);
  castor_program_destroy(prog);
  castor_model_destroy(model);
  castor_context_destroy(ctx);
  return 0;
}
