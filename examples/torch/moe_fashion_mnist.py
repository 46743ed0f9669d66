#!/usr/bin/env python3
"""Train mxsim's MoE on Fashion-MNIST as a PyTorch user would, with mxsim inside:

  the model of bench/peers/moe_step_peer.py (docs/simulator.md "Model": embed, router with a
  Switch auxiliary loss, top-k experts with rows padded to 16, residual, head) built from
  mxsim.torch layers: the experts are mt.GroupedLinear with the chosen recipe (bit-exact
  grouped GEMMs), the edge layers mt.Linear in BF16;
  Megatron's arrangement: BF16 parameters, FP32 masters in AdamW, FP32 main_grad buffers that
  every micro-batch's wgrad reaches through the modules' bridge (fuse_wgrad_accumulation);
  Primus's weight de-oscillation on the MXFP4 experts' masters (mt.WeightDeOsc);
  mt.Recorder writing mxsim's trace: `mxsim-inspector run.h5` follows the run live.

Runs on a GPU when torch sees one (CUDA tensors: mxsim's GPU backend), else on the CPU
(the emulator). Prints one line per step (loss, ms) and, at the end, the median step time.

  python3 examples/torch/moe_fashion_mnist.py --trace run.h5             # default config
  python3 examples/torch/moe_fashion_mnist.py --config large --no-trace  # real-size experts

Needs mxsim.torch on PYTHONPATH (build/python) and the Fashion-MNIST files (idx .gz) in
--data (default $MXSIM_DATA_DIR or /usr/share/datasets/fashion-mnist; random inputs with
--random-data, as on machines without the dataset).
"""
import argparse
import gzip
import os
import statistics
import struct
import sys
import time

import torch

import mxsim.torch as mt

CONFIGS = {
    # examples/default.toml
    "default": dict(d=128, d_ff=256, experts=8, top_k=2, batch=256, micro=4, lr=2e-3),
    # examples/large.toml: a real-size expert layer
    "large": dict(d=2048, d_ff=4096, experts=8, top_k=2, batch=16384, micro=4, lr=2e-3),
}
PAD = 16  # an expert's rows padded to a multiple of 16 (the simulator's kExpertRowPad)


def read_idx(path):
    """An idx file (the MNIST format: big-endian magic, dims, then u8 data) as a uint8 tensor."""
    with gzip.open(path, "rb") as f:
        b = f.read()
    ndim = b[3]
    dims = struct.unpack(">" + "I" * ndim, b[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(b[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


class MoE(torch.nn.Module):
    def __init__(self, c, recipe, device):
        super().__init__()
        bf = dict(params_dtype=torch.bfloat16, device=device, bias=False, fuse_wgrad_accumulation=True)
        self.c = c
        self.embed = mt.Linear(784, c["d"], recipe="bf16", **bf)
        self.router = mt.Linear(c["d"], c["experts"], recipe="bf16", **bf)
        self.experts_fc1 = mt.GroupedLinear(c["experts"], c["d"], c["d_ff"], recipe=recipe, **bf)
        self.experts_fc2 = mt.GroupedLinear(c["experts"], c["d_ff"], c["d"], recipe=recipe, **bf)
        self.head = mt.Linear(c["d"], 10, recipe="bf16", **bf)

    def forward(self, x, y, first):
        c = self.c
        E, k = c["experts"], c["top_k"]
        h0 = self.embed(x, first)
        p = torch.softmax(self.router(h0, first).float(), dim=-1)
        gate, top = torch.topk(p, k, dim=-1)
        T = x.shape[0]
        flat = top.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=E)
        padded = (counts + PAD - 1) // PAD * PAD
        ends = torch.cumsum(padded, 0)
        starts = ends - padded
        rank = torch.arange(flat.numel(), device=x.device) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts,
                                                                                     counts)
        row_sorted = starts[flat[order]] + rank
        row_of = torch.empty_like(row_sorted)
        row_of[order] = row_sorted
        m_splits = padded.tolist()  # host metadata of the grouped GEMMs, as every MoE dispatcher has
        xp = torch.zeros(sum(m_splits), c["d"], device=x.device, dtype=h0.dtype)
        xp = xp.index_copy(0, row_of, h0.repeat_interleave(k, dim=0))
        u = self.experts_fc1(xp, m_splits, first)
        yp = self.experts_fc2(torch.relu(u), m_splits, first)
        moe = (yp[row_of].reshape(T, k, -1).float() * gate.unsqueeze(-1)).sum(1)
        h1 = h0 + moe.to(h0.dtype)
        logits = self.head(h1, first).float()
        f = counts.float() / flat.numel()
        aux = 0.01 * E * (f * p.mean(0)).sum()
        ce = torch.nn.functional.cross_entropy(logits, y, reduction="sum")
        return ce, aux, (logits.argmax(1) == y).sum(), counts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="default", choices=sorted(CONFIGS))
    ap.add_argument("--recipe", default="mxfp4", help="the experts' recipe (mt.LinearRecipe names; default mxfp4)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--trace", default="run.h5", help="the trace to write (default run.h5)")
    ap.add_argument("--no-trace", action="store_true", help="no recorder (the baseline of its cost)")
    ap.add_argument("--watch-elements", default="", help="comma-separated flat [G, N, K] indices of expert weight "
                    "elements recorded every step (the inspector's element timelines)")
    ap.add_argument("--snapshot-steps", default="", help="comma-separated steps whose weights, main_grad and "
                    "maps the trace holds (e.g. 100,150)")
    ap.add_argument("--no-deosc", action="store_true", help="no weight de-oscillation")
    ap.add_argument("--deosc-period", type=int, default=100)
    ap.add_argument("--deosc-ratio", type=float, default=4.0)
    ap.add_argument("--deosc-start", type=int, default=200)
    ap.add_argument("--device", default="auto", help="auto (cuda when torch has it), cpu or cuda")
    ap.add_argument("--data", default=os.environ.get("MXSIM_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--random-data", action="store_true", help="random inputs instead of Fashion-MNIST")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args(argv)
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if a.device == "auto" else a.device))
    c = CONFIGS[a.config]
    torch.manual_seed(a.seed)
    B, nmb = c["batch"], c["micro"]
    if a.random_data:
        images = torch.randint(0, 256, (60000, 784), dtype=torch.uint8)
        labels = torch.randint(0, 10, (60000,))
    else:
        try:
            images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
            labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).long()
        except OSError as e:
            print(f"moe_fashion_mnist: cannot read Fashion-MNIST from {a.data} ({e}); pass --data DIR or "
                  "--random-data", file=sys.stderr)
            return 2
    model = MoE(c, a.recipe, device)
    params = list(model.parameters())
    masters = [p.detach().float().clone() for p in params]  # FP32 masters (Megatron's main params)
    # Megatron's grad buffer: one FP32 block per module, each weight's main_grad a view into it
    # (the modules' wgrad then accumulates into the block in place, and the recorder reads it whole)
    for m in model.modules():
        if isinstance(m, mt.GroupedLinear):
            ws = m.weights()
            buf = torch.zeros((len(ws),) + tuple(ws[0].shape), dtype=torch.float32, device=device)
            for g, w in enumerate(ws):
                w.main_grad = buf[g]
    opt = torch.optim.AdamW(masters, lr=c["lr"], betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    deosc = None
    if not a.no_deosc and any(m.deosc_eligible for m in (model.experts_fc1, model.experts_fc2)):
        deosc = mt.WeightDeOsc(model, period=a.deosc_period, ratio=a.deosc_ratio, start_step=a.deosc_start,
                               masters=dict(zip(params, masters)))
    snaps = [int(v) for v in a.snapshot_steps.split(",") if v.strip()]
    watch = [int(v) for v in a.watch_elements.split(",") if v.strip()]
    rec = None if a.no_trace else mt.Recorder(model, a.trace, seed=a.seed, snapshot_steps=snaps, watch_elements=watch,
                                              snapshot_layers=["experts_fc1", "experts_fc2"] if watch else None)
    times = []
    perm = torch.randperm(images.shape[0])
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        for g in (p.main_grad for p in params):
            g.zero_()
        idx = perm[((step - 1) * B + torch.arange(B)) % images.shape[0]]
        xs = (images[idx].float() / 255.0).to(device=device, dtype=torch.bfloat16)
        ys = labels[idx].to(device)
        loss_sum, aux_sum, correct, tokens = 0.0, 0.0, 0, []
        for mb in range(nmb):
            sl = slice(mb * B // nmb, (mb + 1) * B // nmb)
            ce, aux, ok, counts = model(xs[sl], ys[sl], mb == 0)
            tokens.append(counts)
            ((ce / B) + aux / nmb).backward()  # every wgrad lands in main_grad (the modules' bridge)
            loss_sum, aux_sum, correct = loss_sum + float(ce), aux_sum + float(aux), correct + int(ok)
        for m, p in zip(masters, params):
            m.grad = p.main_grad
        opt.step()
        if deosc is not None:
            deosc.step(step)  # on the masters, after the optimizer (Primus's order)
        with torch.no_grad():
            for p, m in zip(params, masters):
                p.copy_(m.to(p.dtype))
        loss = loss_sum / B + aux_sum / nmb
        if rec is not None:
            rec.log(step, loss=loss, lr=c["lr"], tokens_per_expert=torch.stack(tokens), aux_loss=aux_sum / nmb,
                    accuracy=correct / B)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        print(f"step {step} loss {loss:.4f} accuracy {correct / B:.3f} {times[-1]:.1f} ms", flush=True)
    if rec is not None:
        rec.close()
    warm = times[min(3, len(times) - 1):]
    print(f"config {a.config} recipe {a.recipe} device {device} trace {'off' if rec is None else a.trace}: "
          f"median {statistics.median(warm):.2f} ms per step over {len(warm)} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
