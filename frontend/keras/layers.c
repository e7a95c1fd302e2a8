/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layers.c: the Keras frontend as a host of the layer library
 * (frontend/layers/): each layer's config is config.json's object; its
 * weights are Keras's variables in model.weights.h5 (vars/INDEX of its
 * group, or of a sublayer's); its errors read "layer 'NAME' (CLASS): ..."
 * at the archive; its nodes carry its name and its policy where it
 * differs from the model's. A Sequential model carries Keras's mask from
 * layer to layer (fl_row_mask's rule per layer); a Functional config
 * passes it to the layers that take it as their call's mask argument.
 */
#include "frontend/keras/internal.h"

#include <string.h>

static const float *host_weight(fl_host *h, fl_layer *fl, const char *sub, int index, int order, const char *key,
                                const char *what, const ir_type *t, fl_init init) {
  (void)key, (void)init;
  kr_model *m = h->fe;
  kr_layer *l = fl->fe;
  return sub ? kr_sub_weight(m, l, sub, index, order, what, t) : kr_weight(m, l, index, what, t);
}

static void host_ignore_weight(fl_host *h, fl_layer *fl, int index) {
  kr_model *m = h->fe;
  kr_layer *l = fl->fe;
  const h5_object *o = m->have_h5 ? h5_find(&m->h5, arena_printf(m->arena, "%s/%d", l->vars, index)) : NULL;
  if (o && o->is_dataset) m->h5_used[o - m->h5.objects] = true;
}

static void host_error(fl_host *h, fl_layer *fl, const char *key, fl_style style, bool unsupported, const char *msg) {
  (void)key, (void)style;
  kr_model *m = h->fe;
  diag_error_kind(m->d, unsupported ? DIAG_KIND_UNSUPPORTED : DIAG_KIND_UNSPECIFIED, kr_loc(m),
                  "layer '%s%s' (%s): %s", m->path ? m->path : "", fl->name, fl->cls, msg);
}

static ir_node *host_stamp(fl_host *h, const fl_layer *fl, ir_node *n) {
  return kr_stamp(h->fe, fl->fe, n);
}

void kr_layer_bind(kr_model *m, kr_layer *l) {
  m->host = (fl_host){.g = m->g, .arena = m->arena, .fe = m, .weight = host_weight, .error = host_error,
                      .ignore_weight = host_ignore_weight, .stamp = host_stamp};
  l->fl = (fl_layer){.row = l->row, .cls = l->cls, .name = l->name, .ir_name = l->ir_name, .cfg = l->cfg,
                     .index = l->index, .loc = kr_loc(m), .fe = l};
}

static const char *type_str(kr_model *m, const ir_type *t) {
  str_buf b;
  str_buf_init(&b);
  ir_type_print(t, &b);
  const char *s = arena_strdup(m->arena, str_buf_cstr(&b));
  str_buf_fini(&b);
  return s;
}

bool kr_layer_check(kr_model *m, kr_layer *l) { return fl_layer_check(&m->host, &l->fl); }

bool kr_layer_lower(kr_model *m, kr_layer *l, int k, ir_node **in, int n_in) {
  /* int32 values (an Input with dtype="int32") are indices: only an Embedding takes them */
  kr_call *c = &l->calls[k];
  for (int i = 0; i < n_in && !fl_row_takes_indices(l->row); i++)
    if (!dtype_is_float(in[i]->type.dtype) && i != c->mask_at - 1) {
      kr_layer_error(m, l, "input %d is %s: int32 values are indices, which only an Embedding takes", i,
                     type_str(m, &in[i]->type));
      return false;
    }
  /* the mask its first input carries, as Keras 3 passes it at run time (a Functional config names it
   * as the call's mask argument too; op nodes are not layers: their results carry none) */
  const kr_ref *r0 = c->n_in >= 1 && c->in[0].layer ? &c->in[0] : NULL;
  kr_call *pc = r0 ? &r0->layer->calls[r0->node] : NULL;
  ir_node *pm = pc && r0->tensor < pc->n_mask_outs ? pc->mask : NULL, *ins[KR_MAX_CALL_INPUTS + 1];
  fl_mask_rule rule = l->op_node ? FL_MASK_DROPS : fl_row_mask(l->row);
  if (l->op_node) pm = NULL;
  int mask_at = c->mask_at;
  memcpy(ins, in, (size_t)n_in * sizeof *in);
  if (pm && rule == FL_MASK_TAKES && !mask_at) ins[n_in++] = pm, mask_at = n_in;
  if (pm && rule == FL_MASK_REFUSES) {
    diag_error_kind(m->d, DIAG_KIND_UNSUPPORTED, kr_loc(m),
                    "layer '%s' (%s): its input carries the mask of layer '%s', and castor does not compute %s "
                    "with a mask (Keras's result depends on it)", l->name, l->cls, pc->mask_from, l->cls);
    return false;
  }
  if (pm && rule == FL_MASK_DROPS)
    diag_warning(m->d, kr_loc(m),
                 "layer '%s' (%s) does not support masking: the mask of layer '%s' stops here, as Keras 3 "
                 "destroys it", l->name, l->cls, pc->mask_from);
  fl_call fc = {.k = k, .in = ins, .n_in = n_in, .key_at = c->key_at, .mask_at = mask_at, .causal = c->causal};
  if (!fl_layer_lower(&m->host, &l->fl, &fc)) return false;
  c->mask = rule == FL_MASK_PASSES ? pm : rule == FL_MASK_DROPS || rule == FL_MASK_REFUSES ? NULL : fc.out_mask;
  c->n_mask_outs = !c->mask ? 0 : rule == FL_MASK_PASSES || !fc.n_out_masks ? 1 : fc.n_out_masks;
  c->mask_from = !c->mask ? NULL : rule == FL_MASK_MAKES || !pc || !pc->mask_from ? l->name : pc->mask_from;
  if (fc.n_outs > 1 && !strcmp(m->cls, "Sequential")) {
    kr_layer_error(m, l, "returns %d tensors (return_state or merge_mode null); a Sequential model passes one "
                   "tensor from layer to layer (use a Functional model)", fc.n_outs);
    return false;
  }
  c->out = fc.out;
  c->n_outs = fc.n_outs;
  for (int i = 0; i < fc.n_outs; i++) c->outs[i] = fc.outs[i];
  return true;
}
