/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_cli.c: the option parser of `castor run` / `castor dump`
 * (parse_args in tools/castor.c, included here with its main renamed) on
 * arbitrary argument vectors: the input split at NUL bytes into at most 64
 * arguments after "castor". Invariants: it returns 0, 1 or CLI_EXIT (it
 * never exits); on 0 a command and a model were given and every option
 * value lies within its documented range.
 */
#include "tests/fuzz/fuzz.h"

#define main castor_cli_main
#include "tools/castor.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  memcpy(buf, data, size);
  buf[size] = 0;
  char *argv[66] = {"castor"};
  int argc = 1;
  for (size_t i = 0; i <= size && argc < 65;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  cli c;
  int rc = parse_args(argc, argv, &c);
  if (rc != 0 && rc != 1 && rc != CLI_EXIT) fuzz_fail("unexpected return value", NULL);
  if (rc == 0) {
    if (!c.cmd || !c.model) fuzz_fail("success without a command and a model", NULL);
    const castor_compile_options *co = &c.opts.compile;
    if (c.batch < 1 || co->opt_level < 0 || co->opt_level > 3 || co->threads < 0 ||
        co->threads > 1024 || c.repeat < 0 || c.repeat > 100000 || co->device < -1)
      fuzz_fail("an option value out of range", NULL);
    if (c.inputs.len > (size_t)argc || c.outputs.len > (size_t)argc) fuzz_fail("more files than arguments", NULL);
  }
  vec_free(&c.inputs);
  vec_free(&c.outputs);
  free(buf);
  return 0;
}
