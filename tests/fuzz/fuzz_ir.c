/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_ir.c: the text IR parser on arbitrary text, with the round trip the
 * IR promises (ir/README.md): whatever parses prints, and that text parses
 * back and prints byte for byte the same.
 */
#include <string.h>

#include "tests/fuzz/fuzz.h"

#include "ir/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  diag_sink *d = diag_sink_create();
  ir_graph *g = ir_parse("fuzz.cir", (const char *)data, size, d);
  if (!g && diag_error_count(d) == 0) fuzz_fail("no graph and no error", diag_text(d));
  if (g) {
    str_buf a, b;
    str_buf_init(&a);
    str_buf_init(&b);
    ir_print(g, &a);
    diag_sink *d2 = diag_sink_create();
    ir_graph *g2 = ir_parse("printed.cir", str_buf_cstr(&a), a.len, d2);
    if (!g2) fuzz_fail("the printed IR does not parse back", diag_text(d2));
    ir_print(g2, &b);
    if (a.len != b.len || memcmp(str_buf_cstr(&a), str_buf_cstr(&b), a.len) != 0)
      fuzz_fail("print-parse-print differs", str_buf_cstr(&b));
    ir_graph_destroy(g2);
    diag_sink_destroy(d2);
    str_buf_fini(&a);
    str_buf_fini(&b);
  }
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  return 0;
}
