/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_keras_models.c: the Keras frontend against real Keras 3, over the
 * .keras files of tests/golden/keras-models (made by its generate.py; see
 * its README.md and docs/keras.md):
 *   - outputs: each file compiled by castor (castor_model_load_file, the
 *     CPU JIT) on Keras's inputs matches Keras's model.predict, by
 *     normalized error max|castor - keras| / max|keras| per output, within
 *     the bound of the lowest precision the model computes in
 *     (measured 2026-11-26 on an AVX-512 host, worst of the 25 files):
 *       float32 only                          1e-6  (measured 2.4e-7)
 *       float16 / mixed_float16               2e-3  (7.3e-4)
 *       any bfloat16 (incl. bf16 overrides)   2e-2  (8.8e-3)
 *   - placements: residual, shared_value and overrides, saved by Keras
 *     under each global policy, give the policy castor infers and, after
 *     autocast, each layer's compute dtype as in tests/golden/keras/
 *     placements.txt: Keras's, except the documented differences (a)
 *     softmax in f32, (b) outputs f32, (c) standalone elementwise layers
 *     not between 16-bit matmuls in f32, checked one by one;
 *   - compile_config: the training defaults read from the files;
 *   - bad files: archives rebuilt here from a good file's members with one
 *     thing wrong, each with its one exact error and a non-zero status.
 */
#include "api/internal.h"
#include "formats/zip.h"
#include "frontend/frontend.h"
#include "passes/passes.h"

#include "tests/unit/test_support.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#define DIR CASTOR_SOURCE_DIR "/tests/golden/keras-models"

static char *read_all(const char *path, size_t *len) {
  char *data;
  ck_assert_msg(str_read_file(path, &data, len), "cannot read %s", path);
  return data;
}

/* ---- outputs against model.predict ---- */

typedef struct entry {
  char file[64], policy[32];
  int n_in, n_out;
  char lowest[32]; /* manifest-layers.txt: the lowest precision a layer computes in */
} entry;

static int manifest(const char *path, entry *e, int max) {
  size_t len;
  char *text = read_all(path, &len);
  int n = 0;
  for (char *line = strtok(text, "\n"); line && n < max; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    e[n].lowest[0] = 0;
    ck_assert_int_ge(sscanf(line, "%63s %31s %d %d %31s", e[n].file, e[n].policy, &e[n].n_in, &e[n].n_out,
                            e[n].lowest), 4);
    n++;
  }
  free(text);
  return n;
}

static double bound_for(const entry *e) {
  const char *p = e->lowest[0] ? e->lowest : e->policy;
  if (strstr(p, "bfloat16") || !strncmp(e->file, "overrides", 9)) return 2e-2; /* overrides has bf16 layers */
  if (strstr(p, "float16")) return 2e-3;
  return 1e-6;
}

/* Every file of a manifest against model.predict. */
static void check_outputs(const char *manifest_path, int expected) {
  entry es[64];
  int n = manifest(manifest_path, es, 64);
  ck_assert_int_eq(n, expected);
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  for (int i = 0; i < n; i++) {
    const entry *e = &es[i];
    char path[8192];
    snprintf(path, sizeof path, "%s/%.63s.keras", DIR, e->file);
    castor_model *m;
    ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s: %s", e->file,
                  castor_context_last_error(ctx));
    castor_program *p;
    ck_assert_msg(castor_compile(m, NULL, &p) == CASTOR_OK, "%s: %s", e->file, castor_context_last_error(ctx));
    castor_tensor *in[8] = {0}, *out[8] = {0};
    ck_assert(e->n_in <= 8 && e->n_out <= 8);
    for (int k = 0; k < e->n_in; k++) {
      snprintf(path, sizeof path, "%s/%.63s.in%d.npy", DIR, e->file, k);
      ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &in[k]), CASTOR_OK);
    }
    ck_assert_int_eq(castor_program_num_outputs(p), e->n_out);
    ck_assert_msg(castor_program_run(p, in, e->n_in, out, e->n_out) == CASTOR_OK, "%s: %s", e->file,
                  castor_context_last_error(ctx));
    for (int k = 0; k < e->n_out; k++) {
      castor_tensor *want;
      snprintf(path, sizeof path, "%s/%.63s.out%d.npy", DIR, e->file, k);
      ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &want), CASTOR_OK);
      ck_assert_int_eq(castor_tensor_numel(want), castor_tensor_numel(out[k]));
      const float *a = castor_tensor_data(out[k]), *b = castor_tensor_data(want);
      double err = 0, mag = 0;
      for (int64_t j = 0; j < castor_tensor_numel(want); j++) {
        err = fmax(err, fabs((double)a[j] - b[j]));
        mag = fmax(mag, fabs((double)b[j]));
      }
      double rel = err / mag;
      if (getenv("CASTOR_TEST_VERBOSE")) fprintf(stderr, "%s output %d: %.2e\n", e->file, k, rel);
      ck_assert_msg(rel <= bound_for(e), "%s output %d: normalized error %.3g > %.3g", e->file, k, rel,
                    bound_for(e));
      castor_tensor_destroy(want);
      castor_tensor_destroy(out[k]);
    }
    for (int k = 0; k < e->n_in; k++) castor_tensor_destroy(in[k]);
    castor_program_destroy(p);
    castor_model_destroy(m);
  }
  castor_context_destroy(ctx);
}

START_TEST(test_outputs) { check_outputs(DIR "/manifest.txt", 25); }
END_TEST

/* The layer classes of the general-tensor and CNN ops (generate.py layers):
 * Conv2D, the poolings, Flatten, Reshape, Permute, Concatenate, Subtract,
 * Maximum, Minimum, Embedding on int32 inputs, Softmax and
 * LayerNormalization over other axes, Dropout, under float32 and the mixed
 * policies and with per-layer overrides. */
START_TEST(test_layer_outputs) { check_outputs(DIR "/manifest-layers.txt", 11); }
END_TEST

/* BatchNormalization (with and without center and scale, its moving
 * statistics) and a seeded Dropout (generate.py layers2), under float32
 * and the mixed policies. */
START_TEST(test_layer2_outputs) { check_outputs(DIR "/manifest-layers2.txt", 6); }
END_TEST

/* Dense on rank 3 (generate.py layers3) */
START_TEST(test_layer3_outputs) { check_outputs(DIR "/manifest-layers3.txt", 3); }
END_TEST

/* MultiHeadAttention (generate.py layers4): use_causal_mask, attention_mask
 * with a query row masked whole, key positional and as key=, no biases, a
 * shared layer, under float32 and the mixed policies */
START_TEST(test_layer4_outputs) { check_outputs(DIR "/manifest-layers4.txt", 3); }
END_TEST

/* The layers keras.applications use (generate.py apps, issue 37): ReLU's
 * max_value, negative_slope and threshold, Keras 3's activations (hard_silu,
 * mish, selu, ...), Rescaling, Normalization (stored and given
 * statistics), a squeeze-and-excitation block (broadcasting Multiply and
 * Add), Dropout with a noise_shape, SpatialDropout2D, Cropping2D and
 * LayerScale, op nodes of the functional API with numbers (x + 3.0), under
 * float32 and mixed_bfloat16 */
START_TEST(test_apps_outputs) { check_outputs(DIR "/manifest-apps.txt", 6); }
END_TEST

/* Rescaling and Normalization under mixed_bfloat16 (generate.py rescaling):
 * Keras's calls cast the pixels, the scale, ImageNet's mean and variance to
 * bfloat16 (1/255 becomes 2^-8) and round each op's result, and so must
 * castor, bit for bit: computed in f32 by the infer rule it was 6.8e-3
 * (normalized) from Keras's 1/255, 1.4e-2 from its 1/127.5 - 1 and 1.4e-2
 * from its Normalization. */
/* Runs DIR/STEM.keras on STEM.in0.npy and asserts its n_out outputs are
 * STEM.out<k>.npy bit for bit. */
static void check_bits(const char *stem, int n_out) {
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  char path[8192];
  snprintf(path, sizeof path, "%s.keras", stem);
  castor_model *m;
  ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_program *p;
  ck_assert_msg(castor_compile(m, NULL, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_tensor *in, *out[8] = {0};
  ck_assert_int_le(n_out, 8);
  snprintf(path, sizeof path, "%s.in0.npy", stem);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &in), CASTOR_OK);
  ck_assert_msg(castor_program_run(p, &in, 1, out, n_out) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  for (int k = 0; k < n_out; k++) {
    castor_tensor *want;
    snprintf(path, sizeof path, "%s.out%d.npy", stem, k);
    ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &want), CASTOR_OK);
    ck_assert_int_eq(castor_tensor_numel(want), castor_tensor_numel(out[k]));
    const float *a = castor_tensor_data(out[k]), *b = castor_tensor_data(want);
    int64_t differ = 0, first = -1;
    for (int64_t j = 0; j < castor_tensor_numel(want); j++)
      if (a[j] != b[j] && differ++ == 0) first = j;
    ck_assert_msg(differ == 0, "%s output %d: %lld of %lld values differ from Keras's, first [%lld] %.9g != %.9g",
                  stem, k, (long long)differ, (long long)castor_tensor_numel(want), (long long)first,
                  first >= 0 ? a[first] : 0.0, first >= 0 ? b[first] : 0.0);
    castor_tensor_destroy(want);
    castor_tensor_destroy(out[k]);
  }
  castor_tensor_destroy(in);
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}

START_TEST(test_rescaling_bf16_bits) { check_bits(DIR "/rescale_bf16-mixed_bfloat16", 3); }
END_TEST

/* Activation swish, silu, sigmoid, hard_sigmoid and hard_swish under
 * mixed_bfloat16 (generate.py acts16): Keras on JAX rounds each op of
 * XLA's decomposition to bfloat16 (exp(-x), 1 + e, the sigmoid before the
 * product; relu6(x + 3) with x + 3 rounded), and castor must give its bits
 * (rounded once, 37% of swish's values differed). */
START_TEST(test_acts16_bits) { check_bits(DIR "/acts16-mixed_bfloat16", 5); }
END_TEST

/* AveragePooling2D under mixed_bfloat16 (generate.py avgpool16: 3x3 'same'
 * stride 1, NASNet's, and 2x2 'valid'): Keras on JAX sums the window in
 * bf16, the running sum rounded after each tap; castor must give its bits
 * (with the sum in f32, 1858 of the 3x3 pool's 4096 values differed). */
START_TEST(test_avgpool16_bits) { check_bits(DIR "/avgpool16-mixed_bfloat16", 2); }
END_TEST

/* One epoch of two SGD steps (batch 16, in order) on BASE.keras with BASE.x.npy / BASE.y.npy
 * (generate_image.py): every state BASE.after.<state>.npy names must be as Keras's model.fit
 * left it, within 1e-5 normalized; a trainable one must have moved by more than 1e-4, a
 * nontrainable one not at all. Returns how many states were compared. */
static int check_fit(const char *base, const int64_t *xd, int x_rank) {
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  char path[512];
  snprintf(path, sizeof path, "%s/%s.keras", DIR, base);
  castor_model *m;
  ck_assert_msg(castor_model_load_file(ctx, path, NULL, &m) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_train_options topts;
  castor_model_train_options(m, &topts); /* the file's compile_config: SGD 0.1, cross-entropy from logits */
  castor_program *p;
  ck_assert_msg(castor_compile_train(m, NULL, &topts, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_tensor *xs, *ys, *before[16] = {0};
  snprintf(path, sizeof path, "%s/%s.x.npy", DIR, base);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &xs), CASTOR_OK);
  snprintf(path, sizeof path, "%s/%s.y.npy", DIR, base);
  ck_assert_int_eq(castor_tensor_load_npy(ctx, path, &ys), CASTOR_OK);
  int n_states = castor_program_num_states(p);
  ck_assert_int_le(n_states, 16);
  for (int i = 0; i < n_states; i++) {
    castor_tensor_info info;
    ck_assert_int_eq(castor_program_state_info(p, i, &info), CASTOR_OK);
    castor_state_kind kind = castor_program_state_kind(p, i);
    if (kind == CASTOR_STATE_TRAINABLE || kind == CASTOR_STATE_NONTRAINABLE)
      ck_assert_int_eq(castor_program_get_state(p, info.name, &before[i]), CASTOR_OK);
  }
  int64_t per = 1;
  for (int r = 1; r < x_rank; r++) per *= xd[r];
  for (int b = 0; b < 2; b++) {
    castor_tensor *x, *y;
    int64_t yd[] = {16};
    ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_F32, x_rank, xd, &x), CASTOR_OK);
    ck_assert_int_eq(castor_tensor_create(ctx, CASTOR_I32, 1, yd, &y), CASTOR_OK);
    memcpy(castor_tensor_data(x), (float *)castor_tensor_data(xs) + b * 16 * per, (size_t)(16 * per) * sizeof(float));
    memcpy(castor_tensor_data(y), (int32_t *)castor_tensor_data(ys) + b * 16, 16 * sizeof(int32_t));
    castor_tensor *ins[] = {x, y}, *outs[2] = {NULL, NULL};
    ck_assert_msg(castor_program_run(p, ins, 2, outs, 2) == CASTOR_OK, "%s", castor_context_last_error(ctx));
    for (int k = 0; k < 2; k++) castor_tensor_destroy(outs[k]);
    castor_tensor_destroy(x), castor_tensor_destroy(y);
  }
  int n = 0;
  for (int i = 0; i < n_states; i++) {
    if (!before[i]) continue;
    castor_tensor_info info;
    ck_assert_int_eq(castor_program_state_info(p, i, &info), CASTOR_OK);
    bool trainable = castor_program_state_kind(p, i) == CASTOR_STATE_TRAINABLE;
    snprintf(path, sizeof path, "%s/%s.after.%s.npy", DIR, base, info.name);
    castor_tensor *want, *got;
    ck_assert_msg(castor_tensor_load_npy(ctx, path, &want) == CASTOR_OK, "%s", castor_context_last_error(ctx));
    ck_assert_int_eq(castor_program_get_state(p, info.name, &got), CASTOR_OK);
    ck_assert_int_eq(castor_tensor_numel(got), castor_tensor_numel(want));
    const float *a = castor_tensor_data(got), *w = castor_tensor_data(want), *b0 = castor_tensor_data(before[i]);
    double err = 0, moved = 0, mag = 0;
    for (int64_t k = 0; k < castor_tensor_numel(want); k++) {
      err = fmax(err, fabs((double)a[k] - w[k]));
      moved = fmax(moved, fabs((double)b0[k] - w[k]));
      mag = fmax(mag, fabs((double)w[k]));
    }
    if (getenv("CASTOR_TEST_VERBOSE"))
      fprintf(stderr, "%s %s: %.2e (moved %.2e)\n", base, info.name, err / mag, moved / mag);
    ck_assert_msg(err / mag <= 1e-5, "%s %s: normalized error %.3g", base, info.name, err / mag);
    if (trainable)
      ck_assert_msg(moved / mag > 1e-4, "%s %s: Keras's step moved it by only %.3g", base, info.name, moved / mag);
    else
      ck_assert_msg(moved == 0 && err == 0, "%s %s: a nontrainable variable changed", base, info.name);
    castor_tensor_destroy(want), castor_tensor_destroy(got), castor_tensor_destroy(before[i]);
    n++;
  }
  castor_tensor_destroy(xs), castor_tensor_destroy(ys);
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  return n;
}

/* Training through the image layers (generate_image.py train): grouped Conv2Ds, Conv2DTranspose
 * (conv2d_input_grad's gradient rule), GroupNormalization, bilinear UpSampling2D; measured 1.2e-7. */
START_TEST(test_image_train) {
  /* six layers' kernels and biases, the group norm's gamma and beta */
  ck_assert_int_eq(check_fit("image_train", (int64_t[]){16, 6, 5, 4}, 4), 12);
}
END_TEST

/* Normalization's stored mean and variance are nontrainable variables (generate_image.py
 * norm_train): castor's step leaves them as loaded, as Keras's fit does, and trains the Dense. */
START_TEST(test_normalization_not_trained) {
  ck_assert_int_eq(check_fit("norm_train", (int64_t[]){16, 4}, 2), 4);
}
END_TEST

/* Models used as layers (generate.py nested, issue 37): a Functional holding a nested Sequential
 * stem, a nested Functional that holds a Sequential (two levels) and a second Sequential; a
 * Sequential holding a Sequential; float32 and mixed_bfloat16 */
START_TEST(test_nested_outputs) { check_outputs(DIR "/manifest-nested.txt", 4); }
END_TEST

/* UpSampling2D, nearest (generate.py upsample): size (2, 3), 2 and (1, 2), float32 and mixed_bfloat16 */
START_TEST(test_upsample_outputs) { check_outputs(DIR "/manifest-upsample.txt", 2); }
END_TEST

/* The image layers of frontend/layers/image.c (generate_image.py, issue 37): Conv2D with groups
 * (2, and one per channel as ConvNeXt's 7x7), Conv2DTranspose (valid, same with output_padding,
 * dilated, no bias, unequal strides), GroupNormalization (groups 2, -1, without center or scale,
 * on [N, C]), bilinear UpSampling2D, under float32 and mixed_bfloat16 */
START_TEST(test_image_outputs) { check_outputs(DIR "/manifest-image.txt", 2); }
END_TEST

/* DepthwiseConv2D and SeparableConv2D (generate.py dwconv): depth
 * multipliers, same/valid, strides, dilation, no bias, a 1-channel image,
 * under the five global policies and with per-layer overrides. */
START_TEST(test_dwconv_outputs) { check_outputs(DIR "/manifest-dwconv.txt", 6); }
END_TEST

/* A Dropout with rate > 0 lowers to the IR's dropout (and a BatchNormalization
 * to batch_norm, its moving statistics non-trainable state): the identity when
 * run or evaluated (test_layer_outputs), and in training a mask counted by
 * dropout.step, which an optimizer step advances (docs/training.md). */
START_TEST(test_dropout_train) {
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_model *m;
  ck_assert_int_eq(castor_model_load_file(ctx, DIR "/cnn-float32.keras", NULL, &m), CASTOR_OK);
  castor_program *p = NULL;
  ck_assert_msg(castor_compile_train(m, NULL, NULL, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  castor_tensor *st = NULL;
  ck_assert_int_eq(castor_program_get_state(p, "dropout.step", &st), CASTOR_OK);
  ck_assert_int_eq(*(int64_t *)castor_tensor_data(st), 0);
  castor_tensor_destroy(st);
  castor_program_destroy(p);
  ck_assert_int_eq(castor_compile_eval(m, NULL, NULL, &p), CASTOR_OK);
  ck_assert_int_ne(castor_program_get_state(p, "dropout.step", &st), CASTOR_OK);
  castor_program_destroy(p);
  castor_model_destroy(m);
  /* BatchNormalization trains with its moving statistics as non-trainable state */
  ck_assert_int_eq(castor_model_load_file(ctx, DIR "/bn-float32.keras", NULL, &m), CASTOR_OK);
  castor_train_options to;
  castor_train_options_init(&to);
  to.from_logits = 1; /* its head is a Dense */
  ck_assert_msg(castor_compile_train(m, NULL, &to, &p) == CASTOR_OK, "%s", castor_context_last_error(ctx));
  int found = 0;
  for (int i = 0; i < castor_program_num_states(p); i++) {
    castor_tensor_info info;
    ck_assert_int_eq(castor_program_state_info(p, i, &info), CASTOR_OK);
    const char *nm = info.name;
    if (!strcmp(nm, "bn.moving_mean") || !strcmp(nm, "bn_plain.moving_variance")) {
      ck_assert_int_eq(castor_program_state_kind(p, i), CASTOR_STATE_NONTRAINABLE);
      found++;
    }
    if (!strcmp(nm, "bn_nocenter.gamma")) {
      ck_assert_int_eq(castor_program_state_kind(p, i), CASTOR_STATE_TRAINABLE);
      found++;
    }
  }
  ck_assert_int_eq(found, 3);
  castor_program_destroy(p);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
}
END_TEST

/* ---- placements against placements.txt ---- */

static const char *ir_name_of(const char *keras) {
  return !strcmp(keras, "float32") ? "f32" : !strcmp(keras, "float16") ? "f16" : !strcmp(keras, "bfloat16") ? "bf16" : keras;
}

START_TEST(test_placements) {
  size_t len;
  char *text = read_all(CASTOR_SOURCE_DIR "/tests/golden/keras/placements.txt", &len);
  char cur[160] = "";
  ir_graph *g = NULL;
  diag_sink *d = diag_sink_create();
  int checked = 0, differences = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#' || !line[0]) continue;
    char model[64], policy[64], layer[64], cls[64], kc[16], ko[16], kv[16], cc[16], co[16], rules[16];
    ck_assert_int_eq(sscanf(line, "%63s %63s %63s %63s %15s %15s %15s %15s %15s %15s", model, policy, layer, cls,
                            kc, ko, kv, cc, co, rules), 10);
    if (!strcmp(model, "mnist_mlp")) continue; /* 4096 wide: no .keras file */
    char file[160];
    snprintf(file, sizeof file, "%s-%s", model, policy);
    if (strcmp(file, cur)) {
      ir_graph_destroy(g);
      char path[512];
      snprintf(path, sizeof path, "%s/%s.keras", DIR, file);
      g = fe_load(path, NULL, d, NULL);
      ck_assert_msg(g != NULL, "%s: %s", file, diag_text(d));
      /* the global policy castor infers is the one Keras was given */
      ck_assert_str_eq(ir_policy_name(g->policy), policy);
      pass_options po;
      pass_options_init(&po);
      po.verify_each = true;
      ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_DEFAULT, &po, d), "%s: %s", file, diag_text(d));
      snprintf(cur, sizeof cur, "%s", file);
    }
    const char *got_c = "-", *got_o;
    if (!strcmp(cls, "Output")) {
      const ir_node *v = NULL;
      for (int i = 0; i < g->n_outputs; i++)
        if (!strcmp(g->outputs[i].name, layer)) v = g->outputs[i].value;
      ck_assert_msg(v, "%s: no output %s", file, layer);
      got_o = dtype_name(v->type.dtype);
    } else {
      const ir_node *n = ir_graph_find(g, layer);
      ck_assert_msg(n, "%s: no value %%%s", file, layer);
      char mm[96];
      snprintf(mm, sizeof mm, "%s.matmul", layer);
      const ir_node *mmn = ir_graph_find(g, mm);
      got_o = dtype_name(n->type.dtype);
      if (strcmp(cls, "InputLayer")) got_c = dtype_name((mmn ? mmn : n)->type.dtype);
      if (strcmp(kv, "-")) {
        ir_policy p = n->policy != IR_POLICY_NONE ? n->policy : g->policy;
        ck_assert_msg(!strcmp(dtype_name(ir_policy_variable_dtype(p)), ir_name_of(kv)), "%s/%s: variable dtype %s, Keras %s",
                      file, layer, dtype_name(ir_policy_variable_dtype(p)), kv);
      }
    }
    ck_assert_msg(!strcmp(got_c, ir_name_of(cc)) && !strcmp(got_o, ir_name_of(co)),
                  "%s/%s: castor computes in %s with output %s; the documented rules say %s / %s", file, layer, got_c,
                  got_o, cc, co);
    if (!strcmp(rules, "-")) {
      ck_assert_msg(!strcmp(got_c, ir_name_of(kc)) && !strcmp(got_o, ir_name_of(ko)),
                    "%s/%s: castor %s / %s, Keras %s / %s, and no documented difference", file, layer, got_c, got_o,
                    kc, ko);
    } else {
      differences++;
      ck_assert_msg(strspn(rules, "abc") == strlen(rules), "%s/%s: unknown rule '%s'", file, layer, rules);
      ck_assert_msg(!strcmp(got_o, "f32") && strcmp(ko, "float32"), "%s/%s: rule %s but castor %s, Keras %s", file,
                    layer, rules, got_o, ko);
    }
    checked++;
  }
  ck_assert_int_ge(checked, 100);
  ck_assert_int_ge(differences, 10);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  free(text);
}
END_TEST

/* The layer classes' files against Keras's per-layer dtypes
 * (placements-layers.txt, Keras's compute dtype and output dtype of each
 * layer). Where castor differs, one documented rule (docs/keras.md) must
 * explain it: (a) softmax in f32, (c) a standalone element-wise layer not
 * between 16-bit matmuls in f32, (e) layer_norm and batch_norm in f32, (f) a
 * layout layer (Concatenate, Reshape, Permute, Flatten, the poolings,
 * Embedding, Dropout, ZeroPadding2D, the global poolings) in its
 * operand's dtype where Keras casts its input to its compute dtype; and a
 * model output is f32 (b); (g) a Dense or convolution read only by batch
 * norms gives them its f32 sums (its compute dtype still Keras's). Dense,
 * Conv2D, DepthwiseConv2D and SeparableConv2D must otherwise match Keras
 * exactly (placements-dwconv.txt adds the latter two). */
static bool in_list(const char *cls, const char *const *list) {
  for (; *list; list++)
    if (!strcmp(cls, *list)) return true;
  return false;
}

/* (g): is n read only by batch norms (as their x)? */
static bool only_batch_norms(const ir_graph *g, const ir_node *n) {
  int uses = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i]->n_srcs; k++)
      if (g->nodes[i]->srcs[k] == n) {
        if (g->nodes[i]->op != IR_OP_BATCH_NORM || k != 0) return false;
        uses++;
      }
  for (int k = 0; k < g->n_outputs; k++)
    if (g->outputs[k].value == n) return false;
  return uses > 0;
}

START_TEST(test_layer_placements) {
  static const char *const eltwise[] = {"Add", "Multiply", "Subtract", "Maximum", "Minimum", "Activation", "ReLU", NULL};
  static const char *const layout[] = {"Concatenate", "Reshape", "Permute", "Flatten", "MaxPooling2D",
                                       "AveragePooling2D", "Embedding", "Dropout", "ZeroPadding2D",
                                       "GlobalAveragePooling2D", "GlobalMaxPooling2D", "GlobalAveragePooling1D", NULL};
  /* placements-dwconv.txt: DepthwiseConv2D and SeparableConv2D (generate.py dwconv) */
  static const char *const files[] = {DIR "/placements-layers.txt", DIR "/placements-dwconv.txt"};
  char cur[160] = "";
  ir_graph *g = NULL;
  diag_sink *d = diag_sink_create();
  int checked = 0, skipped = 0, by_rule[6] = {0}, by_class[2] = {0};
  for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
  size_t len;
  char *text = read_all(files[f], &len);
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    char file[64], layer[64], cls[64], kc[16], ko[16];
    int is_out;
    ck_assert_int_eq(sscanf(line, "%63s %63s %63s %15s %15s %d", file, layer, cls, kc, ko, &is_out), 6);
    if (strcmp(file, cur)) {
      ir_graph_destroy(g);
      char path[512];
      snprintf(path, sizeof path, "%s/%s.keras", DIR, file);
      g = fe_load(path, NULL, d, NULL);
      ck_assert_msg(g != NULL, "%s: %s", file, diag_text(d));
      pass_options po;
      pass_options_init(&po);
      po.verify_each = true;
      ck_assert_msg(pass_run_pipeline(g, PASS_PIPELINE_DEFAULT, &po, d), "%s: %s", file, diag_text(d));
      snprintf(cur, sizeof cur, "%s", file);
    }
    const ir_node *n = ir_graph_find(g, layer), *c = NULL;
    if (!n && !strcmp(cls, "Dropout")) { /* rate 0, the identity: no node of its own */
      skipped++;
      continue;
    }
    static const char *const compute_suffix[] = {"matmul", "conv", "softmax", "pointwise", "depthwise", NULL};
    for (int i = 0; compute_suffix[i] && !c; i++) {
      char nm[96];
      snprintf(nm, sizeof nm, "%s.%s", layer, compute_suffix[i]);
      c = ir_graph_find(g, nm);
    }
    if (!n && c && !strcmp(cls, "Conv2D") && c->op == IR_OP_CONV2D) n = c; /* a BatchNormalization folded its bias */
    if (!n && c && !strcmp(cls, "Dense") && c->op == IR_OP_MATMUL) n = c;
    ck_assert_msg(n, "%s: no value %%%s", file, layer);
    if (!strcmp(cls, "DepthwiseConv2D") || !strcmp(cls, "SeparableConv2D")) {
      if (!c && (n->op == IR_OP_GROUP_CONV2D || n->op == IR_OP_CONV2D)) c = n; /* no bias, no activation */
      ck_assert_msg(c, "%s/%s (%s): no convolution node", file, layer, cls);
      by_class[cls[0] == 'S']++;
    }
    /* a contraction computes in its operands' dtype (its result may be its
     * f32 sums, rule (g)) */
    const ir_node *cn = c ? c : n;
    bool contraction = (ir_op_attrs(cn->op) & A(acc)) && cn->n_srcs > 0;
    const char *got_c = dtype_name(contraction ? cn->srcs[0]->type.dtype : cn->type.dtype);
    const char *got_o = dtype_name(n->type.dtype);
    for (int which = 0; which < 2; which++) {
      const char *got = which ? got_o : got_c, *want = ir_name_of(which ? ko : kc);
      if (!strcmp(got, want)) continue;
      int rule = !strcmp(cls, "Softmax") ? 0 : in_list(cls, eltwise) ? 2 : !strcmp(cls, "LayerNormalization") || !strcmp(cls, "BatchNormalization") ? 3
                 : in_list(cls, layout) ? 4 : which && contraction && only_batch_norms(g, n) ? 5 : -1;
      ck_assert_msg(rule >= 0, "%s/%s (%s): castor %s / %s, Keras %s / %s, and no documented difference", file, layer,
                    cls, got_c, got_o, kc, ko);
      if (rule == 4) /* the layout op's operand (the table for a gather) */
        ck_assert_msg(n->n_srcs >= 1 && n->srcs[0]->type.dtype == n->type.dtype,
                      "%s/%s (%s): %s, not its operand's dtype %s", file, layer, cls, got_o,
                      dtype_name(n->srcs[0]->type.dtype));
      else
        ck_assert_msg(!strcmp(got, "f32"), "%s/%s (%s): castor %s, Keras %s: rule %c says f32", file, layer, cls, got,
                      want, "ace?fg"[rule == 0 ? 0 : rule == 2 ? 1 : rule == 5 ? 5 : 2]);
      by_rule[rule]++;
    }
    if (is_out) { /* (b): the model's outputs are f32 */
      for (int i = 0; i < g->n_outputs; i++)
        if (!strcmp(g->outputs[i].name, layer)) {
          ck_assert_str_eq(dtype_name(g->outputs[i].value->type.dtype), "f32");
          if (strcmp(ko, "float32")) by_rule[1]++;
        }
    }
    checked++;
  }
  free(text);
  }
  if (getenv("CASTOR_TEST_VERBOSE"))
    fprintf(stderr, "layer placements: %d checked (%d DepthwiseConv2D, %d SeparableConv2D), %d Dropout skipped; "
            "differences (a) %d (b) %d (c) %d (e) %d (f) %d (g) %d\n", checked, by_class[0], by_class[1], skipped,
            by_rule[0], by_rule[1], by_rule[2], by_rule[3], by_rule[4], by_rule[5]);
  ck_assert_int_ge(checked, 200);
  ck_assert_int_eq(by_class[0], 18); /* dw1, dw2, dw_gray in the six files */
  ck_assert_int_eq(by_class[1], 18);
  for (int r = 0; r < 5; r++)
    if (r != 2) ck_assert_msg(by_rule[r] > 0, "rule %d explains no difference", r);
  /* (c) places no layer of these files apart from Keras: each standalone
   * Activation, Add or Multiply of them is between 16-bit matmuls, some
   * through layout layers (a pool, a reshape), which autocast sees through
   * as TF's AMP does its clear list */
  ck_assert_int_eq(by_rule[2], 0);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST


/* ---- bad files ---- */

/* A stored ZIP of the given members. */
typedef struct part {
  const char *name;
  const char *data;
  size_t len;
} part;

static void put(str_buf *b, uint64_t v, int n) {
  for (int i = 0; i < n; i++) str_buf_putc(b, (char)(v >> (8 * i)));
}

static void zip_build(str_buf *b, const part *ps, int n) {
  size_t offs[8];
  for (int i = 0; i < n; i++) {
    offs[i] = b->len;
    uint32_t crc = (uint32_t)crc32(0, (const Bytef *)ps[i].data, (uInt)ps[i].len);
    put(b, 0x04034b50, 4), put(b, 20, 2), put(b, 0, 2), put(b, 0, 2), put(b, 0, 4), put(b, crc, 4);
    put(b, ps[i].len, 4), put(b, ps[i].len, 4), put(b, strlen(ps[i].name), 2), put(b, 0, 2);
    str_buf_puts(b, ps[i].name);
    str_buf_append(b, ps[i].data, ps[i].len);
  }
  size_t cd = b->len;
  for (int i = 0; i < n; i++) {
    uint32_t crc = (uint32_t)crc32(0, (const Bytef *)ps[i].data, (uInt)ps[i].len);
    put(b, 0x02014b50, 4), put(b, 20, 2), put(b, 20, 2), put(b, 0, 2), put(b, 0, 2), put(b, 0, 4);
    put(b, crc, 4), put(b, ps[i].len, 4), put(b, ps[i].len, 4), put(b, strlen(ps[i].name), 2);
    put(b, 0, 2), put(b, 0, 2), put(b, 0, 2), put(b, 0, 2), put(b, 0, 4), put(b, offs[i], 4);
    str_buf_puts(b, ps[i].name);
  }
  size_t end = b->len;
  put(b, 0x06054b50, 4), put(b, 0, 4), put(b, n, 2), put(b, n, 2), put(b, end - cd, 4), put(b, cd, 4);
  put(b, 0, 2);
}

/* The members of a good file, to edit. */
typedef struct good {
  char *config, *meta, *h5;
  size_t config_len, meta_len, h5_len;
} good;

static void good_load(good *g, const char *file) {
  size_t len;
  char *data = read_all(file, &len);
  zip_archive z;
  zip_error e;
  ck_assert_msg(zip_open(&z, data, len, &e), "%s", e.msg);
  unsigned char *out;
  ck_assert(zip_read(&z, zip_find(&z, "config.json"), 1 << 20, &out, &g->config_len, &e));
  g->config = (char *)out;
  ck_assert(zip_read(&z, zip_find(&z, "metadata.json"), 1 << 20, &out, &g->meta_len, &e));
  g->meta = (char *)out;
  ck_assert(zip_read(&z, zip_find(&z, "model.weights.h5"), 1 << 24, &out, &g->h5_len, &e));
  g->h5 = (char *)out;
  zip_fini(&z);
  free(data);
}

/* s with the first `from` replaced by `to` (which must occur). */
static char *replace(const char *s, const char *from, const char *to) {
  const char *at = strstr(s, from);
  ck_assert_msg(at != NULL, "'%s' not in the config", from);
  str_buf b;
  str_buf_init(&b);
  str_buf_append(&b, s, (size_t)(at - s));
  str_buf_puts(&b, to);
  str_buf_puts(&b, at + strlen(from));
  return str_buf_take(&b);
}

START_TEST(test_compile_config) {
  diag_sink *d = diag_sink_create();
  fe_train_defaults td;
  ir_graph *g = fe_load(DIR "/seq-mixed_float16.keras", NULL, d, &td);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  ck_assert(td.present);
  ck_assert_str_eq(td.loss, "categorical_crossentropy");
  ck_assert_str_eq(td.optimizer, "adam");
  /* Keras scales the loss under mixed_float16 (auto_scale_loss) without
   * saying so in compile_config; castor's default does the same */
  ck_assert_str_eq(td.loss_scale, "");
  ck_assert(td.accuracy);
  ck_assert(fabs(td.learning_rate - 0.002) < 1e-9);
  ir_graph_destroy(g);
  /* a LossScaleOptimizer written out (Keras's defaults) is castor's dynamic scale */
  good gd;
  good_load(&gd, DIR "/seq-float32.keras");
  char *cfg = replace(gd.config, "\"optimizer\": {",
                      "\"optimizer\": {\"class_name\": \"LossScaleOptimizer\", \"config\": {"
                      "\"name\": \"lso\", \"initial_scale\": 32768.0, \"dynamic_growth_steps\": 2000, "
                      "\"inner_optimizer\": {");
  char *cfg2 = replace(cfg, ", \"loss\": \"categorical", "}}, \"loss\": \"categorical");
  part ps[3] = {{"metadata.json", gd.meta, gd.meta_len}, {"config.json", cfg2, strlen(cfg2)},
                {"model.weights.h5", gd.h5, gd.h5_len}};
  str_buf b;
  str_buf_init(&b);
  zip_build(&b, ps, 3);
  g = fe_load_mem("lso.keras", b.data, b.len, NULL, d, &td);
  ck_assert_msg(g != NULL, "%s", diag_text(d));
  ck_assert_str_eq(td.loss_scale, "dynamic");
  ck_assert_str_eq(td.optimizer, "adam");
  str_buf_fini(&b);
  free(cfg), free(cfg2), free(gd.config), free(gd.meta), free(gd.h5);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
}
END_TEST

typedef struct bad_case {
  const char *what;
  const char *from, *to; /* a config edit, or NULL */
  int drop;              /* 1: no config.json, 2: no model.weights.h5 */
  const char *meta;      /* replaces metadata.json */
  const char *h5_file;   /* replaces model.weights.h5 (tests/data/hdf5/...) */
  int truncate;          /* bytes cut from the archive's end; -1: the h5 cut to 1000 bytes */
  const char *msg;
  castor_status status;
} bad_case;

static const bad_case bad[] = {
    {"truncated archive", NULL, NULL, 0, NULL, NULL, 30,
     "m.keras: error: not a valid .keras archive: at byte %s: no end-of-central-directory record (the "
     "file is truncated or not a ZIP archive)\n", CASTOR_ERR_PARSE},
    {"no config.json", NULL, NULL, 1, NULL, NULL, 0,
     "m.keras: error: the archive has no config.json (a Keras 3 .keras file holds config.json, "
     "metadata.json and model.weights.h5)\n", CASTOR_ERR_PARSE},
    {"no weights", NULL, NULL, 2, NULL, NULL, 0,
     "m.keras: error: the archive has no model.weights.h5 (a Keras 3 .keras file holds config.json, "
     "metadata.json and model.weights.h5)\n", CASTOR_ERR_PARSE},
    {"config not JSON", "{\"module\"", "{module", 0, NULL, NULL, 0,
     "m.keras: error: config.json is not valid JSON: at byte 1: expected '\"', got 'm'\n",
     CASTOR_ERR_PARSE},
    {"Keras 2", NULL, NULL, 0, "{\"keras_version\": \"2.15.0\"}", NULL, 0,
     "m.keras: error: written by Keras 2.15.0; castor reads files of Keras 3 (load the model in Keras 3 "
     "and save it again: model.save(\"model.keras\"))\n", CASTOR_ERR_UNSUPPORTED},
    {"unsupported layer", "\"class_name\": \"ReLU\"", "\"class_name\": \"Lambda\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'rect': class 'Lambda' (module keras.layers) is not supported\n"
     "m.keras: note: castor reads InputLayer, Dense, Activation, ReLU, Softmax, Add, Multiply, LayerNormalization, "
     "Subtract, Maximum, Minimum, Concatenate, Flatten, Reshape, Permute, Embedding, Conv2D, MaxPooling2D, "
     "AveragePooling2D, Dropout, BatchNormalization, GlobalAveragePooling2D, GlobalMaxPooling2D, "
     "GlobalAveragePooling1D, GlobalMaxPooling1D, ZeroPadding2D, MultiHeadAttention, DepthwiseConv2D, "
     "SeparableConv2D, Rescaling, Normalization, LayerScale, Cropping2D, UpSampling2D, SpatialDropout2D, "
     "CustomScaleLayer, Conv2DTranspose, GroupNormalization, TrueDivide, LSTM, GRU, SimpleRNN, "
     "Bidirectional, Masking, NotEqual, Any, Cast\n",
     CASTOR_ERR_UNSUPPORTED},
    {"weight of the wrong shape", "\"units\": 6", "\"units\": 7", 0, NULL, NULL, 0,
     "m.keras: error: layer 'head' (Dense): weight '/layers/dense_2/vars/0' (its kernel) has shape "
     "[12, 6], the layer needs [12, 7]\n"
     "m.keras: error: layer 'head' (Dense): weight '/layers/dense_2/vars/1' (its bias) has shape [6], the layer "
     "needs [7]\n", CASTOR_ERR_PARSE},
    {"unsupported key", "\"max_value\": null", "\"max_value\": null, \"max_values\": 6.0", 0, NULL, NULL, 0,
     "m.keras: error: layer 'rect' (ReLU): config key 'max_values' is not supported\n", CASTOR_ERR_UNSUPPORTED},
    {"unsupported optimizer option", "\"loss_scale_factor\": null", "\"loss_scale_factor\": 2.0", 0, NULL, NULL, 0,
     "m.keras: error: compile_config: optimizer option 'loss_scale_factor' is not supported (castor implements no "
     "loss scale factor or gradient accumulation)\n", CASTOR_ERR_UNSUPPORTED},
    {"learning-rate schedule", "\"learning_rate\": 0.0020000000949949026",
     "\"learning_rate\": {\"class_name\": \"InverseTimeDecay\", \"config\": {}}", 0, NULL, NULL, 0,
     "m.keras: error: compile_config: learning_rate: a learning-rate schedule (InverseTimeDecay) is not "
     "supported (castor implements ExponentialDecay, CosineDecay and PiecewiseConstantDecay)\n", CASTOR_ERR_UNSUPPORTED},
    {"schedule without its arguments", "\"learning_rate\": 0.0020000000949949026",
     "\"learning_rate\": {\"class_name\": \"ExponentialDecay\", \"config\": {}}", 0, NULL, NULL, 0,
     "m.keras: error: compile_config: learning_rate: ExponentialDecay lacks initial_learning_rate, decay_steps or "
     "decay_rate\n", CASTOR_ERR_PARSE},
    {"quantized policy", "\"class_name\": \"DTypePolicy\", \"config\": {\"name\": \"float32\"}",
     "\"class_name\": \"QuantizedDTypePolicy\", \"config\": {\"name\": \"int8_from_float32\"}", 0, NULL, NULL, 0,
     "m.keras: error: layer 'shared' (Dense): dtype policy class 'QuantizedDTypePolicy' is not supported (castor reads "
     "DTypePolicy: float32, float16, bfloat16, mixed_float16, mixed_bfloat16; quantized policies are not "
     "supported)\n", CASTOR_ERR_UNSUPPORTED},
    {"Adam's beta_1 out of range", "\"beta_1\": 0.9", "\"beta_1\": 1.5", 0, NULL, NULL, 0,
     "m.keras: error: compile_config: optimizer option 'beta_1' = 1.5 is not supported (castor takes (0, 1))\n",
     CASTOR_ERR_UNSUPPORTED},
    {"HDF5 outside the subset", NULL, NULL, 0, NULL, "chunked.h5", 0,
     "m.keras: error: model.weights.h5: at byte 904: dataset '/w': chunked storage is not supported (castor "
     "reads contiguous datasets; save without chunks or compression)\n", CASTOR_ERR_PARSE},
    {"dataset past the file", NULL, NULL, 0, NULL, NULL, -1,
     "m.keras: error: model.weights.h5: at byte 40: truncated: the superblock says the file has %s bytes, "
     "it has 1000\n", CASTOR_ERR_PARSE},
};


/* Configs of the general-tensor and CNN classes with one thing wrong, each
 * an edit of the good file `base`. */
typedef struct layer_bad_case {
  const char *base;
  bad_case c;
} layer_bad_case;

static const layer_bad_case bad_layers[] = {
    {"cnn-float32", {"Conv2D channels_first", "\"data_format\": \"channels_last\", \"dilation_rate\"",
     "\"data_format\": \"channels_first\", \"dilation_rate\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'conv2d' (Conv2D): data_format other than channels_last (castor's images are [N, "
     "height, width, channels]) is not supported\n", CASTOR_ERR_UNSUPPORTED}},
    {"cnn-float32", {"Conv2D groups", "\"groups\": 1", "\"groups\": 2", 0, NULL, NULL, 0,
     "m.keras: error: layer 'conv2d' (Conv2D): groups=2 must divide the input's 3 channels and the 8 filters\n",
     CASTOR_ERR_PARSE}},
    {"image-float32", {"Conv2DTranspose output_padding at its stride", "\"output_padding\": [1, 1]",
     "\"output_padding\": [2, 1]", 0, NULL, NULL, 0,
     "m.keras: error: layer 'up_same_op' (Conv2DTranspose): output_padding must be null, an integer or [rows, cols] "
     "of integers >= 0, each below its stride (strides [2, 2])\n", CASTOR_ERR_PARSE}},
    {"image-float32", {"GroupNormalization groups", "\"groups\": 2, \"axis\": -1", "\"groups\": 3, \"axis\": -1",
     0, NULL, NULL, 0, "m.keras: error: layer 'gn2' (GroupNormalization): groups=3 must divide the input's 4 channels\n",
     CASTOR_ERR_PARSE}},
    {"image-float32", {"GroupNormalization axis", "\"groups\": 2, \"axis\": -1", "\"groups\": 2, \"axis\": 1",
     0, NULL, NULL, 0, "m.keras: error: layer 'gn2' (GroupNormalization): normalizes groups of the last (channel) axis "
     "of f32[N,13,11,4]: axis=-1 or axis=3 (channels last)\n", CASTOR_ERR_UNSUPPORTED}},
    {"image-float32", {"UpSampling2D bicubic", "\"size\": [2, 3], \"data_format\": \"channels_last\", "
     "\"interpolation\": \"bilinear\"", "\"size\": [2, 3], \"data_format\": \"channels_last\", "
     "\"interpolation\": \"bicubic\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'bilinear23' (UpSampling2D): interpolation 'bicubic' is not supported (nearest, "
     "bilinear)\n", CASTOR_ERR_UNSUPPORTED}},
    {"cnn-float32", {"Conv2D padding", "\"padding\": \"same\"", "\"padding\": \"causal\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'conv2d' (Conv2D): padding 'causal' is not supported (valid, same)\n",
     CASTOR_ERR_UNSUPPORTED}},
    {"cnn-float32", {"Conv2D kernel of the wrong shape", "\"kernel_size\": [3, 3]", "\"kernel_size\": [3, 5]", 0, NULL, NULL, 0,
     "m.keras: error: layer 'conv2d' (Conv2D): weight '/layers/conv2d/vars/0' (its kernel) has shape [3, 3, 3, 8], "
     "the layer needs [3, 5, 3, 8]\n", CASTOR_ERR_PARSE}},
    {"cnn-float32", {"pooling window past the input", "\"pool_size\": [2, 2]", "\"pool_size\": [20, 2]", 0, NULL, NULL, 0,
     "m.keras: error: layer 'max_pooling2d' (MaxPooling2D): max_pool2d window [20,2] does not fit in x "
     "f32[N,16,16,8]\n", CASTOR_ERR_PARSE}},
    {"embed-float32", {"Embedding of floats", "\"dtype\": \"int32\"", "\"dtype\": \"float32\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'emb' (Embedding): its input f32[N,7] is not int32 indices (castor does not cast "
     "floats to indices: declare the model's Input with dtype=\"int32\")\n", CASTOR_ERR_UNSUPPORTED}},
    {"merge-float32", {"int32 into a Dense", "\"batch_shape\": [null, 6], \"dtype\": \"float32\"",
     "\"batch_shape\": [null, 6], \"dtype\": \"int32\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'd1' (Dense): input 0 is i32[N,6]: int32 values are indices, which only an "
     "Embedding takes\n", CASTOR_ERR_PARSE}},
    {"merge-float32", {"Reshape that does not fit", "\"target_shape\": [4, -1]", "\"target_shape\": [5, -1]", 0, NULL, NULL, 0,
     "m.keras: error: layer 'r' (Reshape): target_shape [5, -1] does not fit the input f32[N,24]: its other "
     "dimensions (5 elements) do not divide the 24 elements of an example\n", CASTOR_ERR_PARSE}},
    {"merge-float32", {"Permute not a permutation", "\"dims\": [2, 1]", "\"dims\": [2, 2]", 0, NULL, NULL, 0,
     "m.keras: error: layer 'p' (Permute): dims must be a permutation of 1..2 (1-based, the batch N excluded) "
     "for the input f32[N,4,6]\n", CASTOR_ERR_PARSE}},
    {"merge-float32", {"Concatenate along no axis", "\"axis\": 1}, \"registered_name\": null, \"build_config\"",
     "\"axis\": 3}, \"registered_name\": null, \"build_config\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'cat2' (Concatenate): axis 3 is not a dimension of f32[N,6,4] other than the batch N\n",
     CASTOR_ERR_PARSE}},
    {"merge-float32", {"LayerNormalization over a leading axis", "\"axis\": [1, 2]", "\"axis\": [1]", 0, NULL, NULL, 0,
     "m.keras: error: layer 'ln' (LayerNormalization): axis must name the last dimensions of f32[N,6,4] (not "
     "N), e.g. -1 or [1, 2]: castor normalizes trailing dimensions\n", CASTOR_ERR_UNSUPPORTED}},
    {"merge-float32", {"Softmax over the batch", "\"axis\": 1}", "\"axis\": 0}", 0, NULL, NULL, 0,
     "m.keras: error: layer 'sm' (Softmax): axis 0 is not a dimension of f32[N,6,4] other than the batch N\n",
     CASTOR_ERR_PARSE}},
    {"merge-float32", {"Subtract of three", "\"class_name\": \"Maximum\"", "\"class_name\": \"Subtract\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'mx' (Subtract): takes exactly two inputs, its call has 3\n", CASTOR_ERR_PARSE}},
    {"cnn-float32", {"Dropout rate", "\"rate\": 0.3", "\"rate\": 1.5", 0, NULL, NULL, 0,
     "m.keras: error: layer 'dropout' (Dropout): rate must be a number in [0, 1)\n", CASTOR_ERR_PARSE}},
    /* MultiHeadAttention */
    {"mha-float32", {"MultiHeadAttention dropout", "\"dropout\": 0.0", "\"dropout\": 0.1", 0, NULL, NULL, 0,
     "m.keras: error: layer 'self_attn' (MultiHeadAttention): dropout other than 0 is not supported\n",
     CASTOR_ERR_UNSUPPORTED}},
    {"mha-float32", {"MultiHeadAttention kernel of the wrong shape", "\"key_dim\": 4", "\"key_dim\": 5", 0, NULL,
     NULL, 0,
     "m.keras: error: layer 'self_attn' (MultiHeadAttention): weight "
     "'/layers/multi_head_attention/query_dense/vars/0' (its query kernel) has shape [8, 2, 4], the layer needs "
     "[8, 2, 5]\n", CASTOR_ERR_PARSE}},
    {"mha-float32", {"MultiHeadAttention attention_axes", "\"attention_axes\": [1]", "\"attention_axes\": [2]", 0, NULL,
     NULL, 0, "m.keras: error: layer 'self_attn' (MultiHeadAttention): attention_axes other than [1] (the steps of a "
     "[N, steps, features] input) is not supported\n", CASTOR_ERR_UNSUPPORTED}},
    {"mha-float32", {"MultiHeadAttention query_mask", "\"use_causal_mask\": true", "\"query_mask\": true", 0, NULL, NULL,
     0, "m.keras: error: layer 'self_attn' (MultiHeadAttention): call argument 'query_mask' is not supported\n",
     CASTOR_ERR_UNSUPPORTED}},
    {"mha-float32", {"MultiHeadAttention scores used", "\"keras_history\": [\"self_attn\", 0, 0]",
     "\"keras_history\": [\"self_attn\", 0, 1]", 0, NULL, NULL, 0,
     "m.keras: error: layer 'res' (Add): input 1 is output 1 of layer 'self_attn', which returns 1 tensor\n",
     CASTOR_ERR_PARSE}},
    /* DepthwiseConv2D, SeparableConv2D */
    {"dwconv-float32", {"DepthwiseConv2D kernel of the wrong shape", "\"depth_multiplier\": 2, \"kernel_size\": [3, 3]",
     "\"depth_multiplier\": 3, \"kernel_size\": [3, 3]", 0, NULL, NULL, 0,
     "m.keras: error: layer 'dw1' (DepthwiseConv2D): weight '/layers/depthwise_conv2d/vars/0' (its kernel) has shape "
     "[3, 3, 3, 2], the layer needs [3, 3, 3, 3]\n", CASTOR_ERR_PARSE}},
    {"dwconv-float32", {"SeparableConv2D pointwise kernel of the wrong shape", "\"filters\": 5", "\"filters\": 6", 0,
     NULL, NULL, 0,
     "m.keras: error: layer 'sep1' (SeparableConv2D): weight '/layers/separable_conv2d/vars/1' (its "
     "pointwise_kernel) has shape [1, 1, 12, 5], the layer needs [1, 1, 12, 6]\n", CASTOR_ERR_PARSE}},
    {"dwconv-float32", {"DepthwiseConv2D channels_first", "\"data_format\": \"channels_last\"",
     "\"data_format\": \"channels_first\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'dw1' (DepthwiseConv2D): data_format other than channels_last (castor's images are [N, "
     "height, width, channels]) is not supported\n", CASTOR_ERR_UNSUPPORTED}},
    {"dwconv-float32", {"DepthwiseConv2D regularizer", "\"depthwise_regularizer\": null",
     "\"depthwise_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": 0.01}}", 0, NULL, NULL, 0,
     "m.keras: error: layer 'dw1' (DepthwiseConv2D): depthwise_regularizer other than null is not supported\n",
     CASTOR_ERR_UNSUPPORTED}},
    {"dwconv-float32", {"DepthwiseConv2D depth_multiplier 0", "\"depth_multiplier\": 2", "\"depth_multiplier\": 0", 0,
     NULL, NULL, 0,
     "m.keras: error: layer 'dw1' (DepthwiseConv2D): depth_multiplier must be an integer from 1 to 1048576\n",
     CASTOR_ERR_PARSE}},
    {"dwconv-float32", {"DepthwiseConv2D strides with dilation", "\"strides\": [2, 2], \"padding\": \"valid\", "
     "\"data_format\": \"channels_last\", \"dilation_rate\": [1, 1]", "\"strides\": [2, 2], \"padding\": \"valid\", "
     "\"data_format\": \"channels_last\", \"dilation_rate\": [2, 1]", 0, NULL, NULL, 0,
     "m.keras: error: layer 'dw2' (DepthwiseConv2D): strides > 1 together with dilation_rate > 1 is not supported "
     "(nor by Keras)\n", CASTOR_ERR_PARSE}},
    {"dwconv-float32", {"SeparableConv2D padding", "\"kernel_size\": [3, 2], \"strides\": [2, 1], \"padding\": \"valid\"",
     "\"kernel_size\": [3, 2], \"strides\": [2, 1], \"padding\": \"causal\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'sep2' (SeparableConv2D): padding 'causal' is not supported (valid, same)\n",
     CASTOR_ERR_UNSUPPORTED}},
    {"dwconv-float32", {"DepthwiseConv2D use_bias not a boolean", "\"use_bias\": false, \"depthwise_initializer\"",
     "\"use_bias\": 1, \"depthwise_initializer\"", 0, NULL, NULL, 0,
     "m.keras: error: layer 'dw2' (DepthwiseConv2D): use_bias must be true or false\n", CASTOR_ERR_PARSE}},
    {"dwconv-float32", {"SeparableConv2D pointwise constraint", "\"pointwise_constraint\": null",
     "\"pointwise_constraint\": {\"class_name\": \"NonNeg\", \"config\": {}}", 0, NULL, NULL, 0,
     "m.keras: error: layer 'sep1' (SeparableConv2D): pointwise_constraint other than null is not supported\n",
     CASTOR_ERR_UNSUPPORTED}},
    {"dwconv-float32", {"DepthwiseConv2D window past the input", "\"kernel_size\": [2, 3]", "\"kernel_size\": [12, 3]",
     0, NULL, NULL, 0, "m.keras: error: layer 'dw2' (DepthwiseConv2D): group_conv2d kernel f32[12,3,1,6] (dilations [1,1]) does not "
     "fit in x f32[N,10,9,6] with pads [0,0,0,0]\n", CASTOR_ERR_PARSE}},
};

/* A good file with case c's edit: its one error and status. */
static void check_bad(const bad_case *c, const char *base_file) {
  good gd;
  char base[512];
  snprintf(base, sizeof base, "%s/%s.keras", DIR, base_file);
  good_load(&gd, base);
  char *config = c->from ? replace(gd.config, c->from, c->to) : xstrdup(gd.config);
  char *h5 = gd.h5;
  size_t h5_len = c->truncate < 0 ? 1000 : gd.h5_len;
  char *other = NULL;
  if (c->h5_file) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/hdf5/%s", CASTOR_SOURCE_DIR, c->h5_file);
    h5 = other = read_all(path, &h5_len);
  }
  part ps[3];
  int n = 0;
  ps[n++] = (part){"metadata.json", c->meta ? c->meta : gd.meta, c->meta ? strlen(c->meta) : gd.meta_len};
  if (c->drop != 1) ps[n++] = (part){"config.json", config, strlen(config)};
  if (c->drop != 2) ps[n++] = (part){"model.weights.h5", h5, h5_len};
  str_buf b;
  str_buf_init(&b);
  zip_build(&b, ps, n);
  size_t len = b.len - (c->truncate > 0 ? (size_t)c->truncate : 0);
  castor_context *ctx;
  ck_assert_int_eq(castor_context_create(&ctx), CASTOR_OK);
  castor_model *m = NULL;
  castor_status st = castor_model_load_string(ctx, "m.keras", b.data, len, NULL, &m);
  ck_assert_msg(st != CASTOR_OK && !m, "%s: loaded", c->what);
  char want[1024], num[32];
  snprintf(num, sizeof num, "%zu", c->truncate > 0 ? len : (size_t)gd.h5_len);
  snprintf(want, sizeof want, c->msg, num);
  const char *got = castor_context_last_error(ctx);
  ck_assert_msg(!strcmp(got, want), "%s:\n got  %s\n want %s", c->what, got, want);
  ck_assert_msg(st == c->status, "%s: status %s, want %s", c->what, castor_status_string(st),
                castor_status_string(c->status));
  castor_context_destroy(ctx);
  str_buf_fini(&b);
  free(config), free(other);
  free(gd.config), free(gd.meta), free(gd.h5);
}

START_TEST(test_bad_files) { check_bad(&bad[_i], "dag-float32"); }
END_TEST

START_TEST(test_bad_layers) { check_bad(&bad_layers[_i].c, bad_layers[_i].base); }
END_TEST

static Suite *keras_models_suite(void) {
  Suite *s = suite_create("keras_models");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_outputs);
  tcase_add_test(tc, test_layer_outputs);
  tcase_add_test(tc, test_layer2_outputs);
  tcase_add_test(tc, test_layer3_outputs);
  tcase_add_test(tc, test_layer4_outputs); /* MultiHeadAttention */
  tcase_add_test(tc, test_apps_outputs);   /* keras.applications' layers */
  tcase_add_test(tc, test_rescaling_bf16_bits); /* Rescaling, Normalization in bf16 */
  tcase_add_test(tc, test_acts16_bits);         /* swish, sigmoid, hard_sigmoid in bf16 */
  tcase_add_test(tc, test_avgpool16_bits);      /* a bf16 window sum, rounded per tap */
  tcase_add_test(tc, test_nested_outputs); /* models used as layers */
  tcase_add_test(tc, test_upsample_outputs);
  tcase_add_test(tc, test_image_outputs);
  tcase_add_test(tc, test_image_train);
  tcase_add_test(tc, test_normalization_not_trained);
  tcase_add_test(tc, test_layer_placements);
  tcase_add_test(tc, test_dwconv_outputs);
  tcase_add_test(tc, test_dropout_train);
  tcase_add_test(tc, test_placements);
  tcase_add_test(tc, test_compile_config);
  tcase_add_loop_test(tc, test_bad_files, 0, (int)(sizeof bad / sizeof bad[0]));
  tcase_add_loop_test(tc, test_bad_layers, 0, (int)(sizeof bad_layers / sizeof bad_layers[0]));
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return check_run(keras_models_suite()); }
