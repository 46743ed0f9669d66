#!/usr/bin/env python3
"""Where mxsim.torch.Recorder's time goes in examples/torch/moe_fashion_mnist.py, under
torch.profiler (CPU and CUDA activities: CUPTI sees mxsim's own kernels too).

Runs the example's main with the recorder, profiles steps WARM+1 .. WARM+ACTIVE (the profiler's
schedule advances at every Recorder.log), then prints the top rows by self device time and by self
CPU time. The recorder's phases carry record_function ranges named mxsim.Recorder.*.

  python3 bench/peers/profile_recorder.py [--warm 3] [--active 3] -- <example arguments>
"""
import argparse
import os
import runpy
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

import mxsim.torch as mt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--active", type=int, default=3)
    ap.add_argument("--rows", type=int, default=30)
    ap.add_argument("example_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = [v for v in a.example_args if v != "--"]
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    prof = profile(activities=acts, schedule=schedule(wait=0, warmup=a.warm, active=a.active, repeat=1))
    log = mt.Recorder.log

    def stepping_log(self, *args, **kw):  # the profiler's step boundary is the recorder's row
        r = log(self, *args, **kw)
        prof.step()
        return r

    mt.Recorder.log = stepping_log
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch", "moe_fashion_mnist.py")
    sys.argv = [example, "--steps", str(a.warm + a.active + 1)] + args
    with prof:
        try:
            runpy.run_path(example, run_name="__main__")
        except SystemExit as e:
            if e.code:
                raise
    ka = prof.key_averages()
    dev_key = "self_cuda_time_total"
    if acts[-1] == ProfilerActivity.CUDA:
        for k in ("self_device_time_total", "self_cuda_time_total"):
            try:
                ka.table(sort_by=k, row_limit=1)
                dev_key = k
                break
            except Exception:  # noqa: BLE001 -- the key's name differs between torch versions
                continue
        print(f"## by {dev_key} ({a.active} steps)\n")
        print(ka.table(sort_by=dev_key, row_limit=a.rows, max_name_column_width=60))
    print(f"## by self_cpu_time_total ({a.active} steps)\n")
    print(ka.table(sort_by="self_cpu_time_total", row_limit=a.rows, max_name_column_width=60))
    print("## mxsim.Recorder ranges\n")
    for e in ka:
        if e.key.startswith("mxsim."):
            print(f"{e.key:45s} calls {e.count:5d}  cpu total {e.cpu_time_total / 1e3:9.2f} ms")


if __name__ == "__main__":
    main()
