"""The master's heartbeat path in one process, under cProfile: no gRPC, no agents.

    python bench/profile_heartbeats.py CONTAINERS OPERATORS ROUNDS JOURNAL(0|1)

Plans the harness's application (bench/bench_heartbeats.py), then handles
ROUNDS heartbeats of every container (simulated as the harness does) through
``MasterState.handle``; with JOURNAL=1 the journal is written after each, as
the master does. Prints ms per heartbeat and the profile's top functions.
"""
import cProfile
import os
import pstats
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import proto
from bench_heartbeats import spec_yaml, SimContainer
from appmaster.spec import AppSpec
from appmaster.state import MasterState, Start, Heartbeat, InitContextRequest, Reply
from appmaster.journallog import JournalWriter
C = int(sys.argv[1]); K = int(sys.argv[2]); rounds = int(sys.argv[3]); journal = sys.argv[4] == '1'
spec = AppSpec.from_yaml(spec_yaml(C, K, 1000, 500, 10, 30000))
t0 = time.perf_counter()
now = int(time.time()*1000)
st = MasterState(spec, 'app', 'file://' + tempfile.mkdtemp(), 'tok', now, now)
print('plan', time.perf_counter()-t0)
st.handle(Start(now))
sims = {}
ctxs = {}
for cid in st.plan.containers:
    ctxs[cid] = st.handle(InitContextRequest(cid))[0].value
    sims[cid] = SimContainer(cid)
d = tempfile.mkdtemp()
writer = JournalWriter("file://" + d)
def one(cid, now):
    hb = sims[cid].heartbeat(proto, ctxs[cid], now, 1)
    ins = st.handle(Heartbeat(hb, now))
    r = [i.value for i in ins if isinstance(i, Reply)][0]
    for info in r.deploy_request:
        sims[cid].ops[info.id] = info.checkpoint.window_id
    if journal:
        writer.write(st)
pr = cProfile.Profile()
n = 0
t0 = time.perf_counter()
pr.enable()
for r in range(rounds):
    for cid in list(st.plan.containers):
        now += 1000 // max(1, len(sims)) + 1
        one(cid, now); n += 1
pr.disable()
el = time.perf_counter() - t0
print('heartbeats', n, 'ms/hb', 1000*el/n, 'committed', st.committed - st.initial_window)
pstats.Stats(pr).sort_stats('cumulative').print_stats(30)
