"""mxsim.Trace reads what the C++ trace writer wrote: the same values as h5py, which reads the
file with no project code (docs/trace-format.md)."""
import subprocess

import h5py
import numpy as np

import mxsim
from conftest import TRACE_WRITER


def test_trace_reader_equals_h5py(tmp):
    path = tmp / "t.h5"
    subprocess.run([TRACE_WRITER, str(path), "6", "0"], check=True, capture_output=True)
    t = mxsim.Trace(path)
    assert t.steps == 6
    names = [d["name"] for d in t.datasets()]
    assert names, "the writer declares series"
    with h5py.File(path, "r") as f:
        for d in t.datasets():
            if d["snapshot"]:
                continue
            got = t.series(d["name"])
            want = f[d["name"]][: t.steps]
            assert got.dtype == want.dtype and got.shape == want.shape, d["name"]
            np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
    # the writer's closed-form snapshot (tests/trace_writer_main.cpp): step + i / 32
    np.testing.assert_array_equal(t.snapshot("/snapshots/fc1/master", 4).reshape(-1),
                                  np.float32(4) + np.arange(20, dtype=np.float32) / 32)
    assert t.provenance["commit"] == mxsim.build_commit
    r = mxsim.compare_traces(path, path)
    assert r["identical"] and r["first_difference"] is None
    assert r["compared"]["a_first_row"] == 0 and r["compared"]["b_first_row"] == 0
    assert r["compared"]["pairing"] in ("global_step", "index")
