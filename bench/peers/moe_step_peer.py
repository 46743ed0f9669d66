#!/usr/bin/env python3
"""The mxsim MoE training step written in PyTorch eager mode: the peer that
`mxsim train --backend hip` is timed against on the same GPU.

Model (docs/simulator.md "Model"): x [B, 784] -> embed (784 -> d) -> router
(d -> E, FP32 softmax, top-k, gate = p not renormalised) -> permute (token,
slot) pairs by expert, each expert's rows padded to a multiple of 16 ->
fc1 grouped [E, d_ff, d] -> ReLU -> fc2 grouped [E, d, d_ff] -> combine with the
gates -> residual -> head (d -> 10) -> cross-entropy; Switch load-balancing
auxiliary loss. BF16 parameters with FP32 masters, FP32 main_grad accumulated
over the micro-batches, AdamW (torch.optim.AdamW, fused=False) on the masters,
BF16 copy written back: the same arrangement mxsim simulates.

Expert GEMMs:
  bf16      torch._grouped_mm in BF16 (fprop, dgrad, wgrad)
  fakequant every expert GEMM operand quantize-dequantized to MXFP4 in torch
            ops first (E2M1 values, E8M0 scales, 1x32 blocks along the GEMM's
            K; what a user without FP4 matrix units runs to emulate MXFP4),
            then the same BF16 torch._grouped_mm.

Inputs are random (the timing does not depend on the data; the GPU machine
has no dataset). Prints one CSV line per (config, mode):
  config,mode,steps,ms_per_step,steps_per_s
Usage: moe_step_peer.py [--config default|large|both] [--mode bf16|fakequant|both]
                        [--steps N] [--warmup N]
"""
import argparse
import sys

import torch

CONFIGS = {
    # examples/default.toml
    "default": dict(d_in=784, d=128, d_ff=256, experts=8, top_k=2, batch=256, micro=4, classes=10),
    # examples/large.toml: a real-size expert layer
    "large": dict(d_in=784, d=2048, d_ff=4096, experts=8, top_k=2, batch=16384, micro=4, classes=10),
}


def mxfp4_qdq(t: torch.Tensor, dim: int) -> torch.Tensor:
    """MXFP4 quantize-dequantize of t in blocks of 32 along `dim` (OCP MX v1.0:
    E2M1 elements, E8M0 scale 2^(floor(log2 amax) - 2), saturating, RNE), in
    torch ops. Returns a tensor of t's dtype and shape."""
    x = t.float().movedim(dim, -1)
    n = x.shape[-1]
    pad = (-n) % 32
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    b = x.reshape(*x.shape[:-1], -1, 32)
    amax = b.abs().amax(dim=-1, keepdim=True)
    e = torch.floor(torch.log2(torch.where(amax > 0, amax, torch.ones_like(amax)))) - 2
    s = torch.exp2(e)
    v = (b / s).clamp(-6.0, 6.0)
    a = v.abs()
    # E2M1 grid spacing: 0.5 below 2, 1 in [2, 4), 2 in [4, 6]; torch.round is
    # half-to-even, which is RNE on each uniform stretch of the grid.
    q = torch.where(a < 2, torch.round(a * 2) / 2, torch.where(a < 4, torch.round(a), torch.round(a / 2) * 2))
    out = (torch.sign(v) * q * s).reshape(*x.shape)
    if pad:
        out = out[..., :n]
    return out.movedim(-1, dim).to(t.dtype)


class GroupedLinear(torch.autograd.Function):
    """y[M, N] = x[M, K] . w[g][N, K]^T per group (offs = cumulative row ends);
    backward: dgrad through the grouped GEMM, wgrad dw[g] = dy_g^T x_g."""

    @staticmethod
    def forward(ctx, x, w, offs, fake):
        ctx.save_for_backward(x, w, offs)
        ctx.fake = fake
        xq = mxfp4_qdq(x, 1) if fake else x
        wq = mxfp4_qdq(w, 2) if fake else w
        return torch._grouped_mm(xq, wq.transpose(1, 2), offs=offs)

    @staticmethod
    def backward(ctx, dy):
        x, w, offs = ctx.saved_tensors
        fake = ctx.fake
        dy = dy.contiguous()
        dyq = mxfp4_qdq(dy, 1) if fake else dy
        wq = mxfp4_qdq(w, 1) if fake else w  # dgrad: blocks along N (W's rows)
        dx = torch._grouped_mm(dyq, wq, offs=offs)
        dyt = mxfp4_qdq(dy, 0) if fake else dy  # wgrad: blocks along M
        xt = mxfp4_qdq(x, 0) if fake else x
        dw = torch._grouped_mm(dyt.t(), xt, offs=offs)
        return dx, dw, None, None


class MoE(torch.nn.Module):
    def __init__(self, c, device):
        super().__init__()
        bf = dict(device=device, dtype=torch.bfloat16)
        self.c = c
        self.embed = torch.nn.Parameter(torch.randn(c["d"], c["d_in"], **bf) / c["d_in"] ** 0.5)
        self.router = torch.nn.Parameter(torch.randn(c["experts"], c["d"], **bf) / c["d"] ** 0.5)
        self.fc1 = torch.nn.Parameter(torch.randn(c["experts"], c["d_ff"], c["d"], **bf) / c["d"] ** 0.5)
        self.fc2 = torch.nn.Parameter(torch.randn(c["experts"], c["d"], c["d_ff"], **bf) / c["d_ff"] ** 0.5)
        self.head = torch.nn.Parameter(torch.randn(c["classes"], c["d"], **bf) / c["d"] ** 0.5)

    def forward(self, x, y, fake):
        c = self.c
        E, k = c["experts"], c["top_k"]
        h0 = x @ self.embed.t()
        p = torch.softmax((h0 @ self.router.t()).float(), dim=-1)
        gate, top = torch.topk(p, k, dim=-1)
        T = x.shape[0]
        flat = top.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=E)
        padded = (counts + 15) // 16 * 16
        ends = torch.cumsum(padded, 0)
        starts = ends - padded
        rank = torch.arange(flat.numel(), device=x.device) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        row_sorted = starts[flat[order]] + rank
        row_of = torch.empty_like(row_sorted)
        row_of[order] = row_sorted
        M = int(ends[-1])  # the host needs the total rows (m_splits), as every MoE dispatcher does
        xp = torch.zeros(M, c["d"], device=x.device, dtype=h0.dtype)
        xp = xp.index_copy(0, row_of, h0.repeat_interleave(k, dim=0))
        offs = ends.to(torch.int32)
        u = GroupedLinear.apply(xp, self.fc1, offs, fake)
        yp = GroupedLinear.apply(torch.relu(u), self.fc2, offs, fake)
        moe = (yp[row_of].reshape(T, k, -1).float() * gate.unsqueeze(-1)).sum(1)
        h1 = h0 + moe.to(h0.dtype)
        logits = (h1 @ self.head.t()).float()
        f = counts.float() / flat.numel()
        aux = 0.01 * E * (f * p.mean(0)).sum()
        return torch.nn.functional.cross_entropy(logits, y, reduction="sum") + aux


def time_config(name, mode, steps, warmup, device):
    c = CONFIGS[name]
    torch.manual_seed(1234)
    model = MoE(c, device)
    masters = [p.detach().float().clone().requires_grad_(False) for p in model.parameters()]
    main_grad = [torch.zeros_like(m) for m in masters]
    opt = torch.optim.AdamW(masters, lr=2e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01, fused=False)
    B, nmb = c["batch"], c["micro"]
    xs = torch.randn(B, c["d_in"], device=device, dtype=torch.bfloat16)
    ys = torch.randint(0, c["classes"], (B,), device=device)
    fake = mode == "fakequant"

    def step():
        for g in main_grad:
            g.zero_()
        for mb in range(nmb):
            sl = slice(mb * B // nmb, (mb + 1) * B // nmb)
            loss = model(xs[sl], ys[sl], fake) / B
            loss.backward()
            for g, p in zip(main_grad, model.parameters()):
                g.add_(p.grad.float())  # main_grad += fl32(grad) per micro-batch
                p.grad = None
        for m, g in zip(masters, main_grad):
            m.grad = g
        opt.step()
        with torch.no_grad():
            for p, m in zip(model.parameters(), masters):
                p.copy_(m.to(torch.bfloat16))

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(steps):
        step()
    t1.record()
    torch.cuda.synchronize()
    ms = t0.elapsed_time(t1) / steps
    print(f"{name},{mode},{steps},{ms:.3f},{1000.0 / ms:.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="both", choices=["default", "large", "both"])
    ap.add_argument("--mode", default="both", choices=["bf16", "fakequant", "both"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("moe_step_peer: no CUDA device", file=sys.stderr)
        return 1
    print("config,mode,steps,ms_per_step,steps_per_s")
    for name in (["default", "large"] if a.config == "both" else [a.config]):
        for mode in (["bf16", "fakequant"] if a.mode == "both" else [a.mode]):
            time_config(name, mode, a.steps, a.warmup, "cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main())
