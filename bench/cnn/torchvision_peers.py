#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""castor against ONNX Runtime and PyTorch on real torchvision CNNs.

    pip install torch torchvision onnx onnxruntime numpy   # the peers, for benchmarks only
    python3 bench/cnn/torchvision_peers.py --build build --out /tmp/castor-cnn \
        --models resnet18,regnet_y_400mf --batches 1,16 --rounds 3

Each model (random init: weights=None, eval mode, 224x224) is exported once
to OUT/NAME.onnx by torch's classic exporter (dynamo=False, opset 17, the
batch a dynamic axis); the files stay in OUT (scratch, never committed).
Then, in interleaved rounds, each peer in its own process, one after the
other and never together:
  castor  `castor run MODEL --batch B --repeat R --threads T --policy P`
          (the median of R runs, kernels only: input in place, compiled
          with the batch static);
  ORT     a fresh process with one InferenceSession, intra_op_num_threads
          = T, inter_op_num_threads = 1, allow_spinning = 0 (its pool does
          not spin between runs), the median of R session.run calls after
          one warm-up;
  PyTorch a fresh process, torch.set_num_threads(T), the eager model under
          torch.inference_mode(), the median of R calls after one warm-up.
Prints each round's castor/ORT and castor/PyTorch ratios and their median
(below 1: castor is faster), and the medians of each peer's times. Wall
time: on a shared machine the per-round ratios of neighbouring runs are the
number to read, not the times.

--clock cpu (one thread only) times CPU time instead, which a loaded
machine changes far less than wall time: castor's `cpu:` line (the
process's CPU time over its runs: one thread, so the run's work), the
peers' time.thread_time() around each run (ORT and PyTorch with one
thread run in the calling thread).

Worker modes (used by the driver): --worker ort|torch --model M --batch B.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

MODELS = ("resnet18,resnet50,mobilenet_v2,mobilenet_v3_small,mobilenet_v3_large,efficientnet_b0,squeezenet1_1,"
          "shufflenet_v2_x0_5,regnet_y_400mf,resnext50_32x4d,googlenet,densenet121")


def torch_model(name):
    import torch
    import torchvision
    kw = {"weights": None}
    if name == "googlenet":
        kw.update(aux_logits=False, init_weights=True)
    torch.manual_seed(0)
    return getattr(torchvision.models, name)(**kw).eval()


def export(name, path, size):
    import torch
    m = torch_model(name)
    x = torch.randn(1, 3, size, size)
    torch.onnx.export(m, (x,), path, opset_version=17, dynamo=False, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})


def median_ms(fn, repeat, clock):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        ts.append((clock() - t0) * 1e3)
    return statistics.median(ts)


def worker(args):
    import numpy as np
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    x = np.random.default_rng(1).uniform(-1, 1, (args.batch, 3, args.size, args.size)).astype(np.float32)
    if args.worker == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
        ms = median_ms(lambda: sess.run(None, {"x": x}), args.repeat, clock)
    else:
        import torch
        torch.set_num_threads(args.threads)
        m = torch_model(args.name)
        xt = torch.from_numpy(x)
        with torch.inference_mode():
            ms = median_ms(lambda: m(xt), args.repeat, clock)
    print(f"time: median {ms:.4f} ms")


def run_ms(cmd, pattern=r"time: median ([0-9.]+) ms"):
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(pattern, out.stdout + out.stderr)
    if out.returncode or not m:
        msg = (out.stderr or out.stdout).strip().splitlines()
        return None, msg[-1] if msg else f"status {out.returncode}"
    return float(m.group(1)), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="/tmp/castor-cnn", help="scratch folder for the exported models")
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--policy", default="float32")
    ap.add_argument("--peers", default="ort,torch", help="comma-separated: ort, torch (or empty)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="cpu: CPU time, one thread")
    ap.add_argument("--worker", choices=["ort", "torch"])
    ap.add_argument("--model"), ap.add_argument("--name"), ap.add_argument("--batch", type=int)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.clock == "cpu" and args.threads != 1:
        sys.exit("torchvision_peers: --clock cpu times one thread (--threads 1)")
    castor = os.path.join(args.build, "castor")
    if not os.access(castor, os.X_OK):
        sys.exit(f"torchvision_peers: no castor in {args.build}")
    os.makedirs(args.out, exist_ok=True)
    peers = [p for p in args.peers.split(",") if p]
    print(f"castor {args.policy}, peers {peers}, threads {args.threads}, {args.clock} time, {args.rounds} rounds of "
          f"{args.repeat} runs, "
          f"{args.size}x{args.size}; load average {os.getloadavg()}", flush=True)
    for name in args.models.split(","):
        path = os.path.join(args.out, f"{name}.onnx")
        if not os.path.exists(path):
            export(name, path, args.size)
        for batch in (int(b) for b in args.batches.split(",")):
            times = {p: [] for p in ["castor"] + peers}
            err = None
            for _ in range(args.rounds):
                ms, err = run_ms([castor, "run", path, "--batch", str(batch), "--repeat", str(args.repeat), "--threads",
                                  str(args.threads), "--policy", args.policy],
                                 r"time: median ([0-9.]+) ms" if args.clock == "wall" else r"cpu: mean ([0-9.]+) ms")
                if ms is None:
                    break
                times["castor"].append(ms)
                for p in peers:
                    ms, err = run_ms([sys.executable, os.path.abspath(__file__), "--worker", p, "--model", path, "--name",
                                      name, "--batch", str(batch), "--threads", str(args.threads), "--repeat",
                                      str(args.repeat), "--size", str(args.size), "--clock", args.clock])
                    if ms is None:
                        break
                    times[p].append(ms)
                if err:
                    break
            if err:
                print(f"{name:20s} b{batch:<3d} error: {err}", flush=True)
                continue
            line = f"{name:20s} b{batch:<3d} castor {statistics.median(times['castor']):9.3f} ms"
            for p in peers:
                r = [c / o for c, o in zip(times["castor"], times[p])]
                line += (f" | {p} {statistics.median(times[p]):9.3f} ms castor/{p} {' '.join(f'{v:.2f}' for v in r)}"
                         f" median {statistics.median(r):.2f}")
            print(line, flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
