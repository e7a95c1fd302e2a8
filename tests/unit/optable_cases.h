/* SPDX-License-Identifier: Apache-2.0 */
/*
 * optable_cases.h: check_optable's cases: for each op of ir/ir_ops.def the
 * smallest graph that uses it, its operands chosen by the op's type rule
 * (optable_cases.c).
 */
#ifndef CASTOR_TESTS_OPTABLE_CASES_H
#define CASTOR_TESTS_OPTABLE_CASES_H

#include "ir/ir.h"

enum { W = 16 }; /* the width of the test's input [N, W] */

typedef struct op_case {
  ir_graph *g;
  ir_node *node; /* the op under test */
  float *data[8]; /* constant data, freed with the case */
  int n_data;
} op_case;

/* A constant of dims (rank dims) with seeded values in [-1, 1) (..._positive:
 * [n] values in [0.25, 2), pow's base), its data freed with c. */
ir_node *optable_konst(op_case *c, const char *name, int rank, const int64_t *dims, uint64_t seed);
ir_node *optable_konst_positive(op_case *c, const char *name, int64_t n, uint64_t seed);
/* Builds op's case into c (a fresh graph; c->node the op under test). */
void optable_build_case(ir_op op, op_case *c);
/* Frees the case's graph and constant data. */
void optable_free_case(op_case *c);

#endif
