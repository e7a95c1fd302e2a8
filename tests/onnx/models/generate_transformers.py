#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generates the transformers models of tests/onnx/models (issue 36): a BERT
encoder and a GPT-2 decoder from transformers' own configs, narrowed (2
layers, hidden 64, 4 heads, vocabulary 1000, random init, eval mode),
exported by torch.onnx.export's default (dynamo) exporter with a dynamic
batch and sequence length, with ONNX Runtime's outputs (CPU, float32) on
fixed token ids and an attention mask as the reference.

Run once (needs PyPI: torch, transformers, onnx, onnxruntime, onnxscript);
the files it writes are committed and the test suite never needs PyPI:

    python3 tests/onnx/models/generate_transformers.py

It writes NAME.onnx (NAME: bert, gpt2), tf.ids.npy and tf.mask.npy (int64
[4, 16]: random ids, a mask whose rows 1 and 3 end in padding), NAME.ort.npy
(NAME.ort1.npy: BERT's pooled output), transformers_versions.txt, and
three bad inputs (tf.ids_oob.npy, tf.ids_frac.npy, tf.mask_short.npy;
`generate_transformers.py bad` writes them alone).
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from torch.export import Dim

HERE = os.path.dirname(os.path.abspath(__file__))
B, T, VOCAB = 4, 16, 1000


def bert():
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=128)
    return transformers.BertModel(cfg)


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128, use_cache=False)
    return transformers.GPT2LMHeadModel(cfg)


MODELS = {"bert": (bert, 20), "gpt2": (gpt2, 21)}


def bad_inputs():
    """Inputs castor must refuse with a located error (tests/onnx/onnx_int_cli.sh): an id outside the
    vocabulary, a float id that is not a whole number, a mask one token short."""
    ids = np.load(os.path.join(HERE, "tf.ids.npy"))
    oob = ids.copy()
    oob[1, 5] = VOCAB
    np.save(os.path.join(HERE, "tf.ids_oob.npy"), oob)
    frac = ids.astype(np.float32)
    frac[0, 3] = 2.5
    np.save(os.path.join(HERE, "tf.ids_frac.npy"), frac)
    np.save(os.path.join(HERE, "tf.mask_short.npy"), np.load(os.path.join(HERE, "tf.mask.npy"))[:, :15])


def main():
    if sys.argv[1:] == ["bad"]:  # the bad inputs alone, from the committed tf.ids.npy and tf.mask.npy
        bad_inputs()
        return
    rng = np.random.default_rng(36)
    ids = rng.integers(0, VOCAB, (B, T)).astype(np.int64)
    mask = np.ones((B, T), np.int64)
    mask[1, 11:] = 0
    mask[3, 5:] = 0
    np.save(os.path.join(HERE, "tf.ids.npy"), ids)
    np.save(os.path.join(HERE, "tf.mask.npy"), mask)
    lines = [f"torch {torch.__version__}", f"transformers {transformers.__version__}", f"onnx {onnx.__version__}",
             f"onnxruntime {ort.__version__}",
             "export: torch.onnx.export(model.eval(), (), kwargs={'input_ids': ids, 'attention_mask': mask}, "
             "dynamo=True, input_names=['input_ids', 'attention_mask'], dynamic_shapes={both: {0: Dim('batch'), "
             "1: Dim('sequence', max=128)}}); per-node metadata dropped",
             "reference: onnxruntime.InferenceSession(f, providers=['CPUExecutionProvider']) on tf.ids.npy, tf.mask.npy"]
    for name, (make, seed) in MODELS.items():
        torch.manual_seed(seed)
        model = make().eval()
        path = os.path.join(HERE, f"{name}.onnx")
        batch, seq = Dim("batch"), Dim("sequence", max=128)
        kwargs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        prog = torch.onnx.export(model, (), kwargs=kwargs, dynamo=True, input_names=["input_ids", "attention_mask"],
                                 dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}})
        prog.save(path)
        m = onnx.load(path)
        for n in m.graph.node:  # source stack traces: most of a narrow model's bytes
            del n.metadata_props[:]
            n.doc_string = ""
        del m.metadata_props[:]
        onnx.save(m, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ys = sess.run(None, {"input_ids": ids, "attention_mask": mask})
        for i, y in enumerate(ys):
            np.save(os.path.join(HERE, f"{name}.ort{i if i else ''}.npy"), y)
        dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in m.graph.input]
        ops = sorted({n.op_type for n in m.graph.node})
        opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")][0]
        lines.append(f"{name}.onnx: opset {opset}, inputs {dims}, outputs {[o.name for o in m.graph.output]}, "
                     f"{os.path.getsize(path)} bytes, ops {' '.join(ops)}")
        print(lines[-1])
    with open(os.path.join(HERE, "transformers_versions.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    bad_inputs()


if __name__ == "__main__":
    main()
