#!/usr/bin/python3
"""Re-derive one de-oscillation window from an mxsim train trace (docs/simulator.md).

Needs master and weight_q snapshots of LAYER at every trace row START..START+PERIOD,
where START is the de-osc seed step (deosc.start_step) or a window end; on a fresh
run row r holds global step r + 1, and trace.snapshot_steps lists global steps, so
ask for steps START+1..START+PERIOD+1; run with Debian's /usr/bin/python3
(python3-h5py, python3-numpy):

  mxsim train --set "trace.snapshot_steps=[201,...,301]" --trace run.h5
  /usr/bin/python3 scripts/deosc_window_check.py run.h5 fc1 200 100 4.0

Prints the snapped count against the trace's /layers/LAYER/deosc/snapped and how the
snapped elements' quantized values moved (number of changes, returns, tile events).
"""
import sys, h5py, numpy as np
path, lay, start, period, ratio = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
f = h5py.File(path, 'r', swmr=True)
M = f[f'snap/{lay}/master']; Qd = f[f'snap/{lay}/weight_q']
steps = list(M.attrs['steps'])
rows = list(range(start, start + period + 1))
idx = [steps.index(r) for r in rows]
m = np.stack([M[i] for i in idx]).astype(np.float32)   # [101, G, N, K]
q = np.stack([Qd[i] for i in idx]).astype(np.float32)
T = m.shape[0]
dq_steps = np.abs(np.diff(q, axis=0))                    # [100, ...], exact FP32 diffs
dist_q = np.zeros(m.shape[1:], np.float32)
for s in range(T - 1): dist_q = dist_q + dq_steps[s]
dist_w = np.zeros(m.shape[1:], np.float32)
for s in range(T - 2): dist_w = dist_w + np.abs(m[s + 1] - m[s])   # rows start..start+period-1 exact (the last row's master is post-snap)
# snapped set: master at row 300 exactly on its grid value
snapped = (m[-1] == q[-1]) & (dist_q > 0)
trace_snaps = int(f[f'layers/{lay}/deosc/snapped'][start + period - 1])
print('elements', m[0].size, 'snapped (on-grid at the window-end row with dist_q>0):', int(snapped.sum()), 'trace says', trace_snaps)
# Q-change events per step and per 32x32 tile
G, N, K = m.shape[1:]
ch = dq_steps > 0                                         # [100, G, N, K]
tile_frac = ch.reshape(T - 1, G, N // 32, 32, K // 32, 32).mean(axis=(3, 5))  # [100, G, N/32, K/32]
tile_ev = np.repeat(np.repeat(tile_frac, 32, axis=2), 32, axis=3) >= 0.25     # broadcast back to elements
nchg = ch.sum(axis=0)
sn = snapped
print('snapped: Q changes in window: 1 ->', int((nchg[sn] == 1).sum()), ' 2 ->', int((nchg[sn] == 2).sum()),
      ' >=3 ->', int((nchg[sn] >= 3).sum()))
# change events that happened in a step where >= 25% of the tile's Q changed (scale change signature)
chg_at_tile_ev = (ch & tile_ev).sum(axis=0)
only_tile = sn & (chg_at_tile_ev == nchg)
print('snapped whose every Q change came with >=25% of its tile changing at once:', int(only_tile.sum()))
# net movement: Q at end vs start equal (returned) or not
ret = sn & (q[-1] == q[0])
print('snapped with Q(end) == Q(start) (returned, oscillation-like):', int(ret.sum()), ' Q moved net:', int((sn & (q[-1] != q[0])).sum()))
# size of one grid step relative to the master's movement
r = dist_q[sn] / np.maximum(dist_w[sn], 1e-12)
print('ratio of snapped: median %.1f, p10 %.1f, p90 %.1f' % tuple(np.percentile(r, [50, 10, 90])))
print('dist_w of all: median %.3e; of snapped: median %.3e; |Q step| of snapped median %.3e; |master| median %.3e' % (
    np.median(dist_w), np.median(dist_w[sn]), np.median(dist_q[sn] / np.maximum(nchg[sn], 1)), np.median(np.abs(m[-1]))))
# elements that would be snapped if only non-tile-event Q changes counted
dq_nontile = (dq_steps * ~tile_ev).sum(axis=0)
sn2 = (dist_w > 0) & (dq_nontile / np.maximum(dist_w, 1e-12) >= ratio)
print('would snap counting only Q changes outside tile events:', int(sn2.sum()))
# tiles with >=1 tile event
print('tiles (of %d) with a >=25%% event in the window:' % tile_frac[0].size, int((tile_frac >= 0.25).any(axis=0).sum()))
# all elements whose Q changed at all
print('elements whose Q changed at least once:', int((nchg > 0).sum()), ' ratio >= threshold among them:', int(((dist_w>0)&(dist_q/np.maximum(dist_w,1e-12)>=ratio)).sum()))
