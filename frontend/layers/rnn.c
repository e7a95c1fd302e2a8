/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rnn.c: Keras's recurrent layers in the library: LSTM, GRU (reset_after
 * either way), SimpleRNN and Bidirectional over one of them (merge_mode
 * concat, sum, mul, ave or None), lowered to the IR's scans (ir_ops.def:
 * lstm, gru, simple_rnn; kernel codegen/kernel/cg_rnn.c). One layer call:
 *
 *   xp      x kernel (+ bias): one matmul over every step [N,T,G*H]
 *   scan    lstm/gru/simple_rnn over xp with the recurrent kernel, the
 *           recurrent bias (gru: bias row 1 with reset_after, else zeros)
 *           and the initial states (the call's, or zeros)
 *   outputs the sequence [N,T,H] (return_sequences) or the last state
 *           [N,H]; with return_state, then the final h (and c): several
 *           outputs of one call (fl_call.outs)
 *
 * go_backwards runs the scan with {reverse}=2, so its sequence is in the
 * order of the steps as Keras returns it; Bidirectional's backward layer
 * runs with {reverse}=1, its sequence aligned with the input, which is
 * Keras's flip of it. Keras's weights are the cell's variables (kernel,
 * recurrent_kernel, bias; under Bidirectional each direction's), read as
 * sublayer "cell" ("forward_layer/cell", "backward_layer/cell"); castor's
 * keys NAME.kernel, NAME.recurrent_kernel, NAME.bias (NAME.forward.kernel,
 * ...). Under a 16-bit policy autocast puts the matmul and the scan in the
 * compute dtype: the state is carried in it as Keras carries it (its
 * initial states are zeros of the compute dtype).
 *
 * A mask (the call's mask argument, or a Sequential model's carried mask:
 * mask.c) is the scan's last operand: a masked step keeps the state and
 * its output is the state (Keras's zero_output_for_mask false); with
 * zero_output_for_mask (forced on for Bidirectional's sequences, as Keras
 * does) the outputs at masked steps are zeros, a select after the scan.
 * With return_sequences the mask goes on to the next layer (out_mask).
 *
 * Refused by name: activations other than Keras's defaults (tanh, and
 * sigmoid for the gates: the ops' formulas), stateful, dropout (castor
 * trains without it), a Bidirectional over a layer that itself goes
 * backwards, zero_output_for_mask with go_backwards and return_sequences.
 */
#include "frontend/layers/internal.h"

#include <string.h>

/* One recurrent layer's settings (of the layer, or of Bidirectional's inner config). */
typedef struct rnn_spec {
  ir_op op;
  int gates, states;
  int64_t units;
  bool use_bias, reset_after, go_backwards, return_sequences, return_state, zero_output;
} rnn_spec;

static ir_op op_of_class(const char *cls) {
  if (!strcmp(cls, "LSTM")) return IR_OP_LSTM;
  if (!strcmp(cls, "GRU")) return IR_OP_GRU;
  if (!strcmp(cls, "SimpleRNN")) return IR_OP_SIMPLE_RNN;
  return IR_OP_COUNT;
}

bool fl_row_takes_initial_state(int row) {
  const char *cls = fl_row_class(row);
  return op_of_class(cls) != IR_OP_COUNT || !strcmp(cls, "Bidirectional");
}

/* activation (tanh) and recurrent_activation (sigmoid): what the ops compute */
static bool activation_is(fl_host *m, fl_layer *l, const char *key, const char *want) {
  const json_value *v = fl_cfg(l, key);
  if (!v) return true; /* absent: Keras's default */
  if (v->kind == JSON_STR && !strcmp(v->s, want)) return true;
  const char *have = v->kind == JSON_STR ? v->s : fl_is_null(v) ? "null (linear)" : "not a name";
  fl_unsupported(m, l, key, FL_PLAIN, "%s '%s' is not supported: castor's %s computes %s here", key, have,
                 fl_row_class(l->row), want);
  return false;
}

static bool read_spec(fl_host *m, fl_layer *l, rnn_spec *s) {
  s->op = op_of_class(l->cls);
  CASTOR_ASSERT(s->op != IR_OP_COUNT);
  s->gates = ir_rnn_gates(s->op), s->states = ir_rnn_states(s->op);
  if (!fl_cfg_int(m, l, "units", INT64_MIN, 1, (int64_t)1 << 20, &s->units)) return false;
  if (!activation_is(m, l, "activation", "tanh")) return false;
  if (s->op != IR_OP_SIMPLE_RNN && !activation_is(m, l, "recurrent_activation", "sigmoid")) return false;
  return fl_cfg_bool(m, l, "use_bias", true, &s->use_bias) &&
         fl_cfg_bool(m, l, "reset_after", true, &s->reset_after) &&
         fl_cfg_bool(m, l, "go_backwards", false, &s->go_backwards) &&
         fl_cfg_bool(m, l, "return_sequences", false, &s->return_sequences) &&
         fl_cfg_bool(m, l, "return_state", false, &s->return_state) &&
         fl_cfg_bool(m, l, "zero_output_for_mask", false, &s->zero_output);
}

static ir_node *op_at(fl_host *m, fl_layer *l, int k, ir_op op, const char *suffix, ir_node **in, int n,
                      const ir_attr *a) {
  ir_node *out = NULL;
  return fl_layout_op(m, l, k, op, suffix, in, n, a, &out) ? out : NULL;
}

/* x[..., start:end, ...] along axis (N's dimension whole) */
static ir_node *slice(fl_host *m, fl_layer *l, int k, ir_node *x, int axis, int64_t start, int64_t end,
                      const char *suffix) {
  if (!x) return NULL;
  ir_attr a = {.starts = {.n = x->type.rank}, .ends = {.n = x->type.rank}, .steps = {.n = x->type.rank}};
  for (int r = 0; r < x->type.rank; r++)
    a.steps.v[r] = 1, a.ends.v[r] = x->type.dims[r] == IR_DIM_BATCH ? 0 : x->type.dims[r];
  a.starts.v[axis] = start, a.ends.v[axis] = end;
  return op_at(m, l, k, IR_OP_STRIDED_SLICE, suffix, &x, 1, &a);
}

static ir_node *reshape(fl_host *m, fl_layer *l, int k, ir_node *x, int rank, const int64_t *dims,
                        const char *suffix) {
  if (!x) return NULL;
  ir_attr a = {.shape = {.rank = rank}};
  for (int r = 0; r < rank; r++) a.shape.dims[r] = dims[r];
  return op_at(m, l, k, IR_OP_RESHAPE, suffix, &x, 1, &a);
}

/* zeros of shape dims (a literal broadcast) */
static ir_node *zeros(fl_host *m, fl_layer *l, int k, int rank, const int64_t *dims, const char *suffix) {
  ir_node *z = fl_literal(m, l, fl_node_name(m, l, k, arena_printf(m->arena, "%s.zero", suffix)), 0.0);
  ir_attr a = {.shape = {.rank = rank}};
  for (int r = 0; r < rank; r++) a.shape.dims[r] = dims[r];
  return op_at(m, l, k, IR_OP_BROADCAST_TO, suffix, &z, 1, &a);
}

/* The kernel, recurrent kernel and bias of one direction into l->w[slot..],
 * read on the first call: Keras's cell variables 0, 1, 2 of sublayer sub
 * (their place in the layer's order from order0), castor's keys PFX.kernel... */
static bool read_weights(fl_host *m, fl_layer *l, const rnn_spec *s, int64_t features, const char *sub, int order0,
                         const char *pfx, int slot) {
  int64_t gh = (int64_t)s->gates * s->units;
  bool two_biases = s->op == IR_OP_GRU && s->reset_after;
  ir_type ts[3] = {{DT_F32, 2, {features, gh}}, {DT_F32, 2, {s->units, gh}},
                   two_biases ? (ir_type){DT_F32, 2, {2, gh}} : (ir_type){DT_F32, 1, {gh}}};
  static const char *const names[3] = {"kernel", "recurrent_kernel", "bias"};
  /* Keras's initializers: glorot_uniform, orthogonal, zeros (unit_forget_bias for LSTM) */
  const fl_init inits[3] = {FL_INIT_GLOROT, FL_INIT_ORTHOGONAL,
                            s->op == IR_OP_LSTM ? FL_INIT_UNIT_FORGET_BIAS : FL_INIT_ZEROS};
  int64_t bytes;
  if (!ir_type_bytes(&ts[0], 1, &bytes) || bytes > IR_MAX_TENSOR_BYTES || !ir_type_bytes(&ts[1], 1, &bytes) ||
      bytes > IR_MAX_TENSOR_BYTES) {
    fl_error(m, l, "units", FL_PLAIN, "units=%lld is too large: its kernels would take more than %lld bytes",
             (long long)s->units, (long long)IR_MAX_TENSOR_BYTES);
    return false;
  }
  bool ok = true;
  for (int i = 0; i < (s->use_bias ? 3 : 2); i++) {
    const char *key = arena_printf(m->arena, "%s.%s", pfx, names[i]);
    const float *d = m->weight(m, l, sub, i, order0 + i, key, names[i], &ts[i], inits[i]);
    if (!d) {
      ok = false;
      continue;
    }
    if (ok) l->w[slot + i] = fl_stamp(m, l, ir_build_const(m->g, key, &ts[i], key, d, l->loc));
  }
  return ok;
}

/* v where the mask is true at step `col` (or every step: col < 0, v [N,T,H]), else zeros */
static ir_node *zero_masked(fl_host *m, fl_layer *l, int k, ir_node *v, ir_node *mask, int64_t col, const char *p) {
  int64_t n = mask->type.dims[0], t_len = mask->type.dims[1];
  ir_node *mk = col < 0 ? reshape(m, l, k, mask, 3, (int64_t[]){n, t_len, 1}, arena_printf(m->arena, "%smask.3", p))
                        : slice(m, l, k, mask, 1, col, col + 1, arena_printf(m->arena, "%smask.last", p));
  ir_node *z = fl_literal(m, l, fl_node_name(m, l, k, arena_printf(m->arena, "%smasked.zero", p)), 0.0);
  return mk ? op_at(m, l, k, IR_OP_SELECT, arena_printf(m->arena, "%smasked", p), (ir_node *[]){mk, v, z}, 3,
                    &(ir_attr){0})
            : NULL;
}

/* One direction's scan of x with reverse r (0, 1 or 2: ir_attrs.def) from
 * the states init (NULL: zeros), under mask (NULL: none); its sequence
 * [N,T,H], final h and c. */
static bool scan(fl_host *m, fl_layer *l, int k, const rnn_spec *s, ir_node *x, ir_node *const *init, ir_node *mask,
                 int slot, const char *pfx, int reverse, ir_node **seq, ir_node **hT, ir_node **cT) {
  int64_t n = x->type.dims[0], t_len = x->type.dims[1], h = s->units, gh = (int64_t)s->gates * h;
  const char *p = pfx ? arena_printf(m->arena, "%s.", pfx) : "";
  ir_node *xp = fl_stamp(m, l, ir_build_matmul(m->g, fl_node_name(m, l, k, arena_printf(m->arena, "%sxp", p)), x,
                                               l->w[slot], DT_F32, l->loc));
  ir_node *srcs[5] = {xp, l->w[slot + 1]};
  int ns = 2;
  ir_node *b = s->use_bias ? l->w[slot + 2] : NULL, *rb = NULL;
  if (b && b->type.rank == 2) { /* GRU reset_after: the input bias, then the recurrent one */
    rb = reshape(m, l, k, slice(m, l, k, b, 0, 1, 2, arena_printf(m->arena, "%srb", p)), 1, &gh,
                 arena_printf(m->arena, "%srb.v", p));
    b = reshape(m, l, k, slice(m, l, k, b, 0, 0, 1, arena_printf(m->arena, "%sb", p)), 1, &gh,
                arena_printf(m->arena, "%sb.v", p));
    if (!rb || !b) return false;
  }
  if (b) {
    const char *nm = fl_node_name(m, l, k, arena_printf(m->arena, "%sxp.bias", p));
    srcs[0] = xp = fl_stamp(m, l, ir_build_binary(m->g, IR_OP_ADD, nm, xp, b, l->loc));
  }
  if (s->op == IR_OP_GRU) srcs[ns++] = rb ? rb : zeros(m, l, k, 1, &gh, arena_printf(m->arena, "%srb", p));
  for (int i = 0; i < s->states; i++)
    srcs[ns++] = init && init[i]
                     ? init[i]
                     : zeros(m, l, k, 2, (int64_t[]){n, h}, arena_printf(m->arena, "%s%s0", p, i ? "c" : "h"));
  if (mask) srcs[ns++] = mask;
  for (int i = 0; i < ns; i++)
    if (!srcs[i]) return false;
  ir_attr a = {.reverse = reverse, .reset_after = s->op == IR_OP_GRU && s->reset_after};
  ir_node *y = op_at(m, l, k, s->op, arena_printf(m->arena, "%sscan", p), srcs, ns, &a);
  if (!y) return false;
  int64_t last = reverse == 1 ? 0 : t_len - 1;
  ir_node *hs = y, *cs = NULL;
  if (s->states == 2) {
    hs = reshape(m, l, k, slice(m, l, k, y, 2, 0, 1, arena_printf(m->arena, "%sh", p)), 3, (int64_t[]){n, t_len, h},
                 arena_printf(m->arena, "%sseq", p));
    cs = slice(m, l, k, y, 2, 1, 2, arena_printf(m->arena, "%sc", p));
  }
  *seq = hs;
  *hT = reshape(m, l, k, slice(m, l, k, hs, 1, last, last + 1, arena_printf(m->arena, "%sh.last", p)), 2,
                (int64_t[]){n, h}, arena_printf(m->arena, "%sh_T", p));
  *cT = cs ? reshape(m, l, k, slice(m, l, k, cs, 1, last, last + 1, arena_printf(m->arena, "%sc.last", p)), 2,
                     (int64_t[]){n, h}, arena_printf(m->arena, "%sc_T", p))
           : NULL;
  return hs && *hT && (s->states == 1 || *cT);
}

/* The sequence input and the call's initial states (inputs 1..: Keras's
 * initial_state, positional or keyword), each [N, units]. */
static bool check_inputs(fl_host *m, fl_layer *l, ir_node **in, int n_in, int want_states, int64_t units) {
  ir_node *x = in[0];
  if (x->type.rank != 3 || !ir_type_is_batched(&x->type)) {
    fl_error(m, l, "input", FL_KIND, "needs a sequence input [N, steps, features], got %s", fl_type_str(m, &x->type));
    return false;
  }
  if (n_in == 1) return true;
  if (n_in - 1 != want_states) {
    fl_error(m, l, NULL, FL_PLAIN, "its call passes %d initial state%s, the layer has %d", n_in - 1,
             n_in == 2 ? "" : "s", want_states);
    return false;
  }
  for (int i = 1; i < n_in; i++) {
    const ir_type *t = &in[i]->type;
    if (t->rank != 2 || !ir_type_is_batched(t) || t->dims[1] != units) {
      fl_error(m, l, arena_printf(m->arena, "input%d", i), FL_PLAIN,
               "initial_state[%d] must be [N, %lld] (batch, units), got %s", i - 1, (long long)units,
               fl_type_str(m, t));
      return false;
    }
  }
  return true;
}

/* What a layer returns: the sequence or the last h, then with return_state the final states. */
static void set_outputs(fl_host *m, const rnn_spec *s, ir_node *main_out, ir_node *const *states, int n_states) {
  fl_call *c = m->call;
  c->out = c->outs[0] = main_out;
  c->n_outs = 1;
  if (s->return_state)
    for (int i = 0; i < n_states; i++) c->outs[c->n_outs++] = states[i];
}

/* Keras's zero_output_for_mask: the sequence (or, without return_sequences, the last output:
 * Keras's outputs[-1], the step last taken, col) zero where masked */
static bool zero_outputs(fl_host *m, fl_layer *l, int k, const rnn_spec *s, ir_node *mask, int64_t col,
                         const char *p, ir_node **y) {
  if (!mask || !s->zero_output) return true;
  if (s->return_sequences && s->go_backwards) {
    fl_unsupported(m, l, "zero_output_for_mask", FL_PLAIN,
                   "zero_output_for_mask with go_backwards and return_sequences is not supported");
    return false;
  }
  return (*y = zero_masked(m, l, k, *y, mask, s->return_sequences ? -1 : col, p)) != NULL;
}

bool fl_lower_rnn(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  rnn_spec s;
  ir_node *mask;
  if (!read_spec(m, l, &s) || !fl_call_mask(m, l, in, &n_in, &mask) ||
      !check_inputs(m, l, in, n_in, s.states, s.units))
    return false;
  if (!l->weights_done) {
    if (!read_weights(m, l, &s, in[0]->type.dims[2], "cell", 0, l->ir_name, 0)) return false;
    l->weights_done = true;
  }
  if (l->w[0]->type.dims[0] != in[0]->type.dims[2]) {
    fl_error(m, l, "input", FL_KIND, "call %d's input %s does not fit the kernel %s its first call read", k,
             fl_type_str(m, &in[0]->type), fl_type_str(m, &l->w[0]->type));
    return false;
  }
  ir_node *seq, *st[2];
  if (!scan(m, l, k, &s, in[0], n_in > 1 ? in + 1 : NULL, mask, 0, NULL, s.go_backwards ? 2 : 0, &seq, &st[0],
            &st[1]))
    return false;
  ir_node *y = s.return_sequences ? seq : st[0];
  if (!zero_outputs(m, l, k, &s, mask, s.go_backwards ? 0 : in[0]->type.dims[1] - 1, "", &y)) return false;
  set_outputs(m, &s, y, st, s.states);
  m->call->out_mask = s.return_sequences ? mask : NULL;
  return true;
}

/* Bidirectional's inner layer (config "layer", or "backward_layer") as a layer of its own row, for
 * its key check and settings; the .cast form names the class ("layer=lstm") and writes the
 * inner layer's keys beside merge_mode. */
static bool inner_layer(fl_host *m, fl_layer *l, const char *key, fl_layer *out) {
  const json_value *v = fl_cfg(l, key);
  *out = *l;
  if (v && v->kind == JSON_STR) { /* .cast: layer=lstm, the keys are the Bidirectional's own */
    static const char *const cast_names[][2] = {{"lstm", "LSTM"}, {"gru", "GRU"}, {"simple_rnn", "SimpleRNN"}};
    int row = -1;
    for (int i = 0; i < 3; i++)
      if (!strcmp(v->s, cast_names[i][0])) row = fl_layer_row(cast_names[i][1]);
    if (row < 0) {
      fl_error(m, l, key, FL_PLAIN, "layer must be lstm, gru or simple_rnn, got '%s'", v->s);
      return false;
    }
    out->row = row, out->cls = fl_row_class(row);
    return true;
  }
  const json_value *cls = v && v->kind == JSON_OBJ ? json_field(v, "class_name") : NULL;
  const json_value *cfg = v && v->kind == JSON_OBJ ? json_field(v, "config") : NULL;
  if (!cls || cls->kind != JSON_STR || !cfg || cfg->kind != JSON_OBJ) {
    fl_error(m, l, key, FL_PLAIN, "%s is not a layer (an object with class_name and config)", key);
    return false;
  }
  int row = fl_layer_row(cls->s);
  if (row < 0 || op_of_class(cls->s) == IR_OP_COUNT) {
    fl_unsupported(m, l, key, FL_PLAIN, "Bidirectional over a %s is not supported (LSTM, GRU, SimpleRNN)", cls->s);
    return false;
  }
  out->row = row, out->cls = fl_row_class(row), out->cfg = cfg;
  return fl_layer_check(m, out);
}

static bool same_cell(const rnn_spec *a, const rnn_spec *b) {
  return a->op == b->op && a->units == b->units && a->return_sequences == b->return_sequences &&
         a->return_state == b->return_state;
}

bool fl_lower_bidirectional(fl_host *m, fl_layer *l, int k, ir_node **in, int n_in) {
  fl_layer fw, bw;
  rnn_spec sf, sb;
  if (!inner_layer(m, l, "layer", &fw) || !read_spec(m, &fw, &sf)) return false;
  bool own_backward = !fl_is_null(fl_cfg(l, "backward_layer"));
  if (own_backward ? !inner_layer(m, l, "backward_layer", &bw) || !read_spec(m, &bw, &sb) : (sb = sf, false))
    return false;
  if (!own_backward) sb.go_backwards = !sf.go_backwards;
  if (sf.go_backwards || !sb.go_backwards) {
    fl_unsupported(m, l, "layer", FL_PLAIN,
                   "a forward layer with go_backwards=true is not supported (castor's Bidirectional runs the "
                   "backward layer over the reversed sequence)");
    return false;
  }
  if (!same_cell(&sf, &sb) || (sf.op == IR_OP_GRU && sf.reset_after != sb.reset_after)) {
    fl_error(m, l, "backward_layer", FL_PLAIN,
             "backward_layer must be the forward layer's class with its units, return_sequences and return_state");
    return false;
  }
  const json_value *mm = fl_cfg(l, "merge_mode");
  static const char *const modes[] = {"concat", "sum", "mul", "ave"};
  int mode = fl_is_null(mm) && mm ? -1 : 0; /* null: the two outputs as a list */
  if (mm && !fl_is_null(mm)) {
    mode = 4;
    for (int i = 0; i < 4 && mm->kind == JSON_STR; i++)
      if (!strcmp(mm->s, modes[i])) mode = i;
    if (mode == 4) {
      fl_error(m, l, "merge_mode", FL_PLAIN, "merge_mode must be concat, sum, mul, ave or null, got %s",
               mm->kind == JSON_STR ? mm->s : "not a name");
      return false;
    }
  }
  ir_node *mask;
  if (!fl_call_mask(m, l, in, &n_in, &mask) || !check_inputs(m, l, in, n_in, 2 * sf.states, sf.units)) return false;
  /* Keras sets each direction's zero_output_for_mask to return_sequences */
  sf.zero_output = sb.zero_output = sf.return_sequences;
  if (!l->weights_done) {
    const char *fk = arena_printf(m->arena, "%s.forward", l->ir_name);
    const char *bk = arena_printf(m->arena, "%s.backward", l->ir_name);
    bool okf = read_weights(m, l, &sf, in[0]->type.dims[2], "forward_layer/cell", 0, fk, 0);
    bool okb = read_weights(m, l, &sb, in[0]->type.dims[2], "backward_layer/cell", 3, bk, 3);
    if (!okf || !okb) return false;
    l->weights_done = true;
  }
  if (l->w[0]->type.dims[0] != in[0]->type.dims[2]) {
    fl_error(m, l, "input", FL_KIND, "call %d's input %s does not fit the kernel %s its first call read", k,
             fl_type_str(m, &in[0]->type), fl_type_str(m, &l->w[0]->type));
    return false;
  }
  ir_node *seq[2], *st[2][2];
  if (!scan(m, l, k, &sf, in[0], n_in > 1 ? in + 1 : NULL, mask, 0, "forward", 0, &seq[0], &st[0][0], &st[0][1]) ||
      !scan(m, l, k, &sb, in[0], n_in > 1 ? in + 1 + sf.states : NULL, mask, 3, "backward", 1, &seq[1], &st[1][0],
            &st[1][1]))
    return false;
  ir_node *y[2] = {sf.return_sequences ? seq[0] : st[0][0], sf.return_sequences ? seq[1] : st[1][0]}, *out;
  /* the backward sequence is aligned with the input (reverse 1), so is the mask */
  rnn_spec zb = sb;
  zb.go_backwards = false;
  if (!zero_outputs(m, l, k, &sf, mask, 0, "forward.", &y[0]) || !zero_outputs(m, l, k, &zb, mask, 0, "backward.", &y[1]))
    return false;
  m->call->out_mask = sf.return_sequences ? mask : NULL;
  m->call->n_out_masks = mode < 0 ? 2 : 1; /* merge_mode null: both sequences carry it */
  fl_call *c = m->call;
  if (mode < 0) {
    c->outs[0] = y[0], c->outs[1] = y[1], c->n_outs = 2;
  } else {
    static const ir_op ops[] = {IR_OP_CONCAT, IR_OP_ADD, IR_OP_MUL, IR_OP_ADD};
    const char *nm = mode == 3 ? fl_node_name(m, l, k, "sum") : fl_node_name(m, l, k, NULL);
    ir_attr a = {.axis = y[0]->type.rank - 1};
    out = fl_stamp(m, l, ir_build_op(m->g, ops[mode], nm, y, 2, &a, l->loc));
    if (out && mode == 3)
      out = fl_stamp(m, l, ir_build_binary(m->g, IR_OP_MUL, fl_node_name(m, l, k, NULL), out,
                                           fl_literal(m, l, fl_node_name(m, l, k, "half"), 0.5), l->loc));
    if (!out) return false;
    c->outs[0] = out, c->n_outs = 1;
  }
  if (sf.return_state)
    for (int d = 0; d < 2; d++)
      for (int i = 0; i < sf.states; i++) c->outs[c->n_outs++] = st[d][i];
  c->out = c->outs[0];
  return true;
}
