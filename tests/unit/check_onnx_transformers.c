/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_onnx_transformers.c: a BERT encoder and a GPT-2 decoder from
 * transformers' configs (2 layers, hidden 64, 4 heads, vocabulary 1000),
 * exported by torch.onnx.export's dynamo exporter with a dynamic batch and
 * sequence (tests/onnx/models/generate_transformers.py), against ONNX
 * Runtime's outputs: int64 token ids and attention mask as run-time inputs
 * (the embedding lookup, the mask's cast, GatherND, And, Where, IsNaN at
 * run time; the shape arithmetic folded at import), the dims bound at load
 * (batch 4 and 1, sequence 16). The measure is the issue's: max |got -
 * want| over max |want|, within 1e-5 (float32) and 2e-2 (mixed_bfloat16).
 * Bad integer inputs: an id outside the vocabulary, a float tensor for the
 * int64 ids, a mask of the wrong length are errors that name the input.
 */
#include "castor.h"

#include "tests/unit/test_support.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* model compiled under policy for `batch` rows and sequence 16 (bound at load) */
static castor_program *compile(castor_context *ctx, const char *model, int64_t batch, const char *policy) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/onnx/models/%s.onnx", CASTOR_SOURCE_DIR, model);
  castor_load_options lo;
  castor_load_options_init(&lo);
  const char *names[] = {"batch", "sequence"};
  const int64_t values[] = {batch, 16};
  lo.dim_names = names, lo.dim_values = values, lo.n_dims = 2;
  castor_model *m;
  ck_assert_msg(castor_model_load_file(ctx, path, &lo, &m) == CASTOR_OK, "%s: %s", model, castor_context_last_error(ctx));
  castor_compile_options o;
  castor_compile_options_init(&o);
  o.policy = policy;
  castor_program *p;
  ck_assert_msg(castor_compile(m, &o, &p) == CASTOR_OK, "%s %s: %s", model, policy, castor_context_last_error(ctx));
  castor_model_destroy(m);
  return p;
}

static const struct {
  const char *model;
  int n_outputs;
} MODELS[] = {{"bert", 2}, {"gpt2", 1}};

START_TEST(test_transformers_match_ort) {
  const char *model = MODELS[_i].model;
  int no = MODELS[_i].n_outputs;
  static const struct { int64_t batch; const char *policy; double bound; } runs[] = {
      {4, "float32", 1e-5}, {1, "float32", 1e-5}, {4, "mixed_bfloat16", 2e-2}, {1, "mixed_float16", 2e-3}};
  for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
    castor_context *ctx;
    castor_context_create(&ctx);
    castor_tensor *ids4 = test_load_onnx_npy(ctx, "tf.ids.npy"), *mask4 = test_load_onnx_npy(ctx, "tf.mask.npy");
    castor_tensor *in[2] = {test_first_rows(ctx, ids4, runs[r].batch), test_first_rows(ctx, mask4, runs[r].batch)};
    castor_program *p = compile(ctx, model, runs[r].batch, runs[r].policy);
    castor_tensor *y[2] = {NULL, NULL};
    ck_assert_msg(castor_program_run(p, in, 2, y, no) == CASTOR_OK, "%s: %s", model, castor_context_last_error(ctx));
    for (int k = 0; k < no; k++) {
      char name[64];
      snprintf(name, sizeof name, "%s.ort%s.npy", model, k ? "1" : "");
      castor_tensor *want = test_load_onnx_npy(ctx, name);
      ck_assert_int_eq(castor_tensor_rank(y[k]), castor_tensor_rank(want));
      ck_assert_int_eq(castor_tensor_dims(y[k])[0], runs[r].batch);
      for (int d = 1; d < castor_tensor_rank(y[k]); d++)
        ck_assert_int_eq(castor_tensor_dims(y[k])[d], castor_tensor_dims(want)[d]);
      double e = test_rel_max_err(castor_tensor_data(y[k]), castor_tensor_data(want), castor_tensor_numel(y[k]));
      ck_assert_msg(e <= runs[r].bound, "%s output %d under %s, batch %lld: max error / max |ref| %.3g > %.3g", model,
                    k, runs[r].policy, (long long)runs[r].batch, e, runs[r].bound);
      castor_tensor_destroy(want);
      castor_tensor_destroy(y[k]);
    }
    castor_program_destroy(p);
    castor_tensor_destroy(in[0]), castor_tensor_destroy(in[1]);
    castor_tensor_destroy(ids4), castor_tensor_destroy(mask4);
    castor_context_destroy(ctx);
  }
}
END_TEST

/* Bad integer inputs: errors naming the input, never a read outside the table. */
START_TEST(test_transformers_bad_inputs) {
  castor_context *ctx;
  castor_context_create(&ctx);
  castor_tensor *ids = test_load_onnx_npy(ctx, "tf.ids.npy"), *mask = test_load_onnx_npy(ctx, "tf.mask.npy");
  castor_program *p = compile(ctx, "bert", 4, "float32");
  castor_tensor *y[2] = {NULL, NULL};
  /* an id outside the vocabulary [-1000, 1000) */
  int64_t *d = castor_tensor_data(ids), keep = d[21];
  d[21] = 1000;
  ck_assert_int_eq(castor_program_run(p, (castor_tensor *[]){ids, mask}, 2, y, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx),
                   "error: input 'input_ids' [1, 5] = 1000 is outside [-1000, 1000), the rows of the table that gather "
                   "'node_embedding' reads (a negative index counts from the end)\n");
  d[21] = -1001;
  ck_assert_int_eq(castor_program_run(p, (castor_tensor *[]){ids, mask}, 2, y, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(castor_context_last_error(ctx), "[1, 5] = -1001 is outside"), "%s", castor_context_last_error(ctx));
  d[21] = -1; /* the last row: ONNX's negative index */
  ck_assert_msg(castor_program_run(p, (castor_tensor *[]){ids, mask}, 2, y, 2) == CASTOR_OK, "%s",
                castor_context_last_error(ctx));
  castor_tensor_destroy(y[0]), castor_tensor_destroy(y[1]);
  y[0] = y[1] = NULL;
  d[21] = keep;
  /* a float tensor for the int64 ids */
  castor_tensor *f;
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, 2, castor_tensor_dims(ids), &f), CASTOR_OK);
  ck_assert_int_eq(castor_program_run(p, (castor_tensor *[]){f, mask}, 2, y, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: input 'input_ids': expected i64[4,16], got f32[4,16]\n");
  /* a mask one token short */
  castor_tensor *m15;
  ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_I64, 2, (int64_t[]){4, 15}, &m15), CASTOR_OK);
  ck_assert_int_eq(castor_program_run(p, (castor_tensor *[]){ids, m15}, 2, y, 2), CASTOR_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(castor_context_last_error(ctx), "error: input 'attention_mask': expected i64[4,16], got i64[4,15]\n");
  castor_tensor_destroy(f), castor_tensor_destroy(m15);
  castor_program_destroy(p);
  castor_tensor_destroy(ids), castor_tensor_destroy(mask);
  castor_context_destroy(ctx);
}
END_TEST

static Suite *onnx_transformers_suite(void) {
  Suite *s = suite_create("onnx_transformers");
  TCase *tc = tcase_create("transformers");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_transformers_match_ort, 0, (int)(sizeof MODELS / sizeof *MODELS));
  tcase_add_test(tc, test_transformers_bad_inputs);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(onnx_transformers_suite()); }
