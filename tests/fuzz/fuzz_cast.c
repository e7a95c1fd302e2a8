/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_cast.c: the .cast frontend (lexer, parser, resolution, lowering) on
 * arbitrary text. Invariants: an input either loads into a graph that
 * verifies, or fails with at least one error; never both.
 *
 * The Glorot init is capped at 1 MiB (fe_options.max_init_bytes) so that
 * a large `units=` costs an error, not seconds of random numbers; `weights`
 * lines resolve against the working directory and only regular files are
 * read (formats/safetensors_read.c).
 */
#include "tests/fuzz/fuzz.h"

#include "frontend/frontend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  diag_sink *d = diag_sink_create();
  fe_options o;
  fe_options_init(&o);
  o.max_init_bytes = 1 << 20;
  ir_graph *g = fe_load_mem("fuzz.cast", (const char *)data, size, &o, d, NULL);
  if (g && diag_error_count(d) > 0) fuzz_fail("a graph came back with errors", diag_text(d));
  if (!g && diag_error_count(d) == 0) fuzz_fail("no graph and no error", diag_text(d));
  if (g && !ir_verify(g, d)) fuzz_fail("the frontend's graph does not verify", diag_text(d));
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  return 0;
}
