/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verify.c: the verify pass.
 * In: any graph. Out: the same graph, unchanged; fails with diagnostics if
 * an invariant of ir_verify does not hold. Runs first in every pipeline so
 * that hand-written IR (castor-opt) is checked before passes rely on it.
 */
#include "passes/passes.h"

bool pass_verify_run(ir_graph *g, pass_context *ctx) { return ir_verify(g, ctx->diag); }
