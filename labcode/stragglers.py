"""Generated from labs/08_stragglers.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import heapq
import math
import numpy as np
import time
import torch
import torch.distributed as dist
import torch.nn.functional as F
from dplab.profiles import event_times
from dplab.timing import in_band
from dplab.trace import covered_within
from torch.nn.utils import parameters_to_vector
from torch.nn.utils import vector_to_parameters


# From labs/08_stragglers.ipynb, section "1. The straggler and its model".
STRAGGLER_Q = 0.1                    # probability that a rank straggles in a step


# From labs/08_stragglers.ipynb, section "1. The straggler and its model".
STRAGGLER_D = 0.030                  # seconds that a straggling rank sleeps


# From labs/08_stragglers.ipynb, section "1. The straggler and its model".
def straggler_delay(rank, step, q=STRAGGLER_Q, d=STRAGGLER_D, seed=0):
    # The delay injected on `rank` in `step`: d with probability q, else 0, the same
    # in every run.
    return d if np.random.default_rng([seed, rank, step]).random() < q else 0.0


# From labs/08_stragglers.ipynb, section "1. The straggler and its model".
def p_step_delayed(p, q, k=0):
    # P(more than k of p independent ranks straggle): with k = 0, P(the step waits d).
    j = np.arange(k + 1)
    comb = np.array([math.comb(p, int(i)) for i in j], dtype=float)
    return float(1.0 - np.sum(comb * q**j * (1.0 - q) ** (p - j)))


# From labs/08_stragglers.ipynb, section "1. The straggler and its model".
def expected_step_time(c, p, q, d, k=0):
    # E[c + the (k+1)-th largest of p delays]: the expected maximum when k = 0.
    return c + d * p_step_delayed(p, q, k)


# From labs/08_stragglers.ipynb, section "1. The straggler and its model".
def step_time_quantile(c, p, q, d, u, k=0):
    # The u-quantile of the step time: c + d once the chance of a delayed step
    # exceeds 1 - u.
    return c + (d if p_step_delayed(p, q, k) > 1.0 - u else 0.0)


# From labs/08_stragglers.ipynb, section "2. A synchronous step, with and without the straggler".
def flat_grad(model):
    return torch.cat([q.grad.reshape(-1) for q in model.parameters()])


# From labs/08_stragglers.ipynb, section "2. A synchronous step, with and without the straggler".
def sync_sgd_step(model, x, y, lr, weight, delay=0.0, mark=None):
    # One synchronous SGD step: local gradient, the injected sleep, all-reduce of the
    # weighted gradients (weight = this rank's share of the global batch), update.
    # mark(phase), if given, is called as each phase ends. Returns the local loss.
    mark = mark or (lambda phase: None)
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    mark("compute")
    time.sleep(delay)
    mark("sleep")
    g = flat_grad(model) * weight
    dist.all_reduce(g)
    mark("all-reduce")
    with torch.no_grad():
        w = parameters_to_vector(model.parameters()) - lr * g
        vector_to_parameters(w, model.parameters())
    mark("update")
    return loss.item()


# From labs/08_stragglers.ipynb, section "2. A synchronous step, with and without the straggler".
def phase_events(marks, rank):
    # Events (dplab.trace's form) from (step, phase, seconds) marks, a "start" first in
    # each step: every phase from the mark before it to its own, and the whole step.
    events, begun, last = [], {}, {}
    for s, phase, t in marks:
        if phase != "start":
            events.append(dict(rank=rank, step=s, lane="work", name=phase,
                               start=last[s], end=t))
        begun.setdefault(s, t)
        last[s] = t
        if phase == "update":
            events.append(dict(rank=rank, step=s, lane="step", name="step",
                               start=begun[s], end=t))
    return events


# From labs/08_stragglers.ipynb, section "3. Local SGD: average every H steps".
def local_sgd_step(model, x, y, lr, step, H, weight, delay=0.0):
    # One local SGD step; after every H-th step the parameters become their weighted
    # mean over ranks (weight = this rank's share of the global batch). Returns the
    # local loss.
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    time.sleep(delay)
    with torch.no_grad():
        w = parameters_to_vector(model.parameters()) - lr * flat_grad(model)
        if (step + 1) % H == 0:
            w = w * weight
            dist.all_reduce(w)
        vector_to_parameters(w, model.parameters())
    return loss.item()


# From labs/08_stragglers.ipynb, section "3. Local SGD: average every H steps".
def local_sgd_wait(delays, H):
    # The model's total wait of local SGD: over each round of H steps, the largest sum
    # of one rank's delays (delays: one row per step, one column per rank).
    delays = np.asarray(delays)
    rounds = range(0, len(delays), H)
    return float(sum(delays[i:i + H].sum(axis=0).max() for i in rounds))


# From labs/08_stragglers.ipynb, section "4. An asynchronous parameter server".
PS_GRAD = 11                         # tags: worker -> server gradient,


# From labs/08_stragglers.ipynb, section "4. An asynchronous parameter server".
PS_PARAMS = 12                       # server -> worker parameters,


# From labs/08_stragglers.ipynb, section "4. An asynchronous parameter server".
PS_STOP = 13                         # server -> worker: no more work


# From labs/08_stragglers.ipynb, section "4. An asynchronous parameter server".
def ps_server(comm, w, lr, updates, wait_for=None, every=1, staleness_aware=False):
    # Rank 0: hold the parameters w (float64) and apply the gradients that ranks
    # 1..p-1 push. wait_for=None: asynchronous, every gradient applied on arrival
    # (scaled by 1/(1+staleness) if staleness_aware); wait_for=m: synchronous, the mean
    # of the first m gradients computed on the current version, later ones dropped.
    # Stops after `updates` updates.
    from mpi4py import MPI
    workers = comm.Get_size() - 1
    out = np.empty(w.size + 1)
    msg = np.empty(w.size + 2)
    status = MPI.Status()
    version = 0
    # (seconds, worker, seq, version computed on, version now, used)
    log = []
    # (seconds, version, parameters) every `every` updates
    history = [(0.0, 0, w.copy())]
    t0 = time.perf_counter()

    def reply(dest, tag):
        out[0] = version
        out[1:] = w
        comm.Send(out if tag == PS_PARAMS else out[:1], dest=dest, tag=tag)

    issued = min(workers, updates) if wait_for is None else workers
    for j in range(1, workers + 1):
        reply(j, PS_PARAMS if j <= issued else PS_STOP)
    active = set(range(1, issued + 1))
    waiting, pending = [], []
    while version < updates:
        comm.Recv(msg, source=MPI.ANY_SOURCE, tag=PS_GRAD, status=status)
        src, used, seq = status.Get_source(), int(msg[0]), int(msg[1])
        now = time.perf_counter() - t0
        if wait_for is None:                        # asynchronous: apply now, reply now
            scale = 1.0 / (1 + version - used) if staleness_aware else 1.0
            w -= (lr * scale) * msg[2:]
            log.append((now, src, seq, used, version, True))
            version += 1
            if issued < updates:
                issued += 1
                reply(src, PS_PARAMS)
            else:
                reply(src, PS_STOP)
                active.discard(src)
        elif used < version:                        # synchronous, stale: drop it
            log.append((now, src, seq, used, version, False))
            reply(src, PS_PARAMS)
        else:                                       # synchronous, current: keep it
            log.append((now, src, seq, used, version, True))
            pending.append(msg[2:].copy())
            waiting.append(src)
            if len(pending) == wait_for:
                w -= lr * np.mean(pending, axis=0)
                version += 1
                tag = PS_PARAMS if version < updates else PS_STOP
                for j in waiting:
                    reply(j, tag)
                    if tag == PS_STOP:
                        active.discard(j)
                waiting, pending = [], []
        if version % every == 0 and history[-1][1] != version:
            history.append((time.perf_counter() - t0, version, w.copy()))
    while active:                                   # still computing: drop, stop
        comm.Recv(msg, source=MPI.ANY_SOURCE, tag=PS_GRAD, status=status)
        src = status.Get_source()
        now = time.perf_counter() - t0
        log.append((now, src, int(msg[1]), int(msg[0]), version, False))
        reply(src, PS_STOP)
        active.discard(src)
    return {"log": log, "history": history, "seconds": time.perf_counter() - t0}


# From labs/08_stragglers.ipynb, section "4. An asynchronous parameter server".
def ps_worker(comm, model, batch, delay):
    # Ranks 1..p-1: pull parameters from rank 0, push one gradient per pull, until
    # told to stop. batch(i) -> (x, y) of this worker's i-th gradient; delay(i) ->
    # seconds to sleep before pushing it.
    # Returns how many gradients it pushed and their float64 sum.
    from mpi4py import MPI
    params = list(model.parameters())
    n = sum(q.numel() for q in params)
    inbox = np.empty(n + 1)
    outbox = np.empty(n + 2)
    total = np.zeros(n)
    status = MPI.Status()
    sent = 0
    while True:
        comm.Recv(inbox, source=0, tag=MPI.ANY_TAG, status=status)
        if status.Get_tag() == PS_STOP:
            return sent, total
        with torch.no_grad():
            vector_to_parameters(torch.from_numpy(inbox[1:]).to(params[0]), params)
        model.zero_grad()
        x, y = batch(sent)
        F.cross_entropy(model(x), y).backward()
        outbox[2:] = flat_grad(model).double().cpu().numpy()
        time.sleep(delay(sent))
        outbox[0] = inbox[0]
        outbox[1] = sent
        total += outbox[2:]
        comm.Send(outbox, dest=0, tag=PS_GRAD)
        sent += 1


# From labs/08_stragglers.ipynb, section "5. Backup workers", "Time saved".
def ps_schedule(workers, updates, wait_for, c, delay):
    # The times of a synchronous server's updates, in virtual time: worker j's i-th
    # gradient takes c + delay(j, i) seconds; as in ps_server, each update is the
    # first wait_for gradients computed on the current version, and a gradient that
    # arrives for an older one is dropped, its worker starting again at once.
    events = [(c + delay(j, 0), j, 0, 0) for j in range(1, workers + 1)]
    heapq.heapify(events)
    version, waiting, times = 0, [], []
    while version < updates:
        t, j, i, used = heapq.heappop(events)
        if used < version:                                   # stale: dropped
            heapq.heappush(events, (t + c + delay(j, i + 1), j, i + 1, version))
            continue
        waiting.append((j, i))
        if len(waiting) == wait_for:
            version += 1
            times.append(t)
            for jj, ii in waiting:
                heapq.heappush(events, (t + c + delay(jj, ii + 1), jj, ii + 1, version))
            waiting = []
    return np.array(times)


# From labs/08_stragglers.ipynb, section "Every rank's wait, step by step", "The check".
def all_reduce_extra(log, delays):
    # Each (rank, step)'s all-reduce time beyond a sleeper's, from the timeline. A rank
    # that slept joins the all-reduce last and waits for nobody: the median of theirs is
    # the reference. Split by whether another rank slept while this one did not
    # (delayed) or nobody slept (clean).
    spans = [(e["rank"], e["step"], e["end"] - e["start"]) for e in log
             if e["lane"] == "work" and e["name"] == "all-reduce"]
    slept = [t for r, s, t in spans if delays[s][r] > 0]
    split = {"delayed": [], "clean": []}
    if not slept:                                   # nobody slept: no reference
        return {k: np.array(v) for k, v in split.items()}
    ref = np.median(slept)
    for r, s, t in spans:
        if delays[s].max() == 0:
            split["clean"].append(t - ref)
        elif delays[s][r] == 0:
            split["delayed"].append(t - ref)
    return {k: np.array(v) for k, v in split.items()}


# From labs/08_stragglers.ipynb, section "The straggler through the profiler's lens".
def idle_per_rank(analysis, ranks):
    # Each rank's idle seconds in a profiler step, the median over its steps, from its
    # trace as HTA parsed it: the step less the time in which some thread of the rank
    # ran an operator or the backend an all-reduce (events begun in the step, cut at
    # its end: Gloo's thread may close an event a moment after the step ends).
    idle = {}
    for r in ranks:
        names, start, end = event_times(analysis, r)
        per_step = []
        for i in names.index[names.str.startswith("ProfilerStep#")]:
            inside = (start >= start[i]) & (start < end[i]) & (names.index != i)
            busy = covered_within(zip(start[inside], end[inside]), (start[i], end[i]))
            per_step.append(end[i] - start[i] - busy)
        idle[r] = float(np.median(per_step))
    return idle


# From labs/08_stragglers.ipynb, section "The straggler through the profiler's lens".
def check_straggler_idle(idle, slow, d):
    # Assert that the idle time points to rank `slow`: d more than every other rank's,
    # within d/2.
    others = [t for r, t in idle.items() if r != slow]
    extra = idle[slow] - max(others, default=0.0)
    assert in_band("idle of the slowed rank beyond the others' (ms)", 1e3 * extra,
                   1e3 * d / 2, 1e3 * 3 * d / 2), \
        f"the trace points to rank {max(idle, key=idle.get)}, not rank {slow}"
    return extra
