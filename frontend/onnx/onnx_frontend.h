/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_frontend.h: the ONNX frontend (docs/onnx.md). Reads a ModelProto
 * (formats/onnx.h) and lowers its graph, node by node through the table of
 * onnx_ops.def, into an ir_graph with the contract of frontend.h: every
 * float f32, each node's layer named after its ONNX node (or op type and
 * index), errors located as `model.onnx: node 'NAME' (OpType): error: ...`.
 */
#ifndef CASTOR_FRONTEND_ONNX_FRONTEND_H
#define CASTOR_FRONTEND_ONNX_FRONTEND_H

#include "frontend/frontend.h"

/* The newest default-domain opset castor's op table is written against. */
enum { FE_ONNX_MAX_OPSET = 21 };

ir_graph *fe_onnx_load(const char *file, const char *bytes, size_t len, const fe_options *o,
                       diag_sink *d, fe_train_defaults *out_defaults);

#endif
