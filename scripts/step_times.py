"""Per-step time of mxsim training runs timed in pairs, a short and a long run of one config
(scripts/gpu-device-run.sh's steps stage, scripts/gpu-step-ab.sh): the difference of the two wall
times over the extra steps, so start-up (data, allocation, JIT) cancels."""


def per_step(rows, **match):
    """ms per step of each rep whose two runs exited 0 and match every key=value of `match`.

    rows: dicts of a CSV with the columns rep, steps, exit, wall_s (seconds) and the matched ones.
    """
    by = {}
    for r in rows:
        if r["exit"] == "0" and all(r[k] == v for k, v in match.items()):
            by.setdefault(r["rep"], {})[int(r["steps"])] = float(r["wall_s"])
    out = []
    for d in by.values():
        if len(d) == 2:
            (n0, t0), (n1, t1) = sorted(d.items())
            out.append((t1 - t0) / (n1 - n0) * 1000)
    return out
