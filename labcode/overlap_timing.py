"""Generated from labs/04_ddp.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import numpy as np
import time
import torch
import torch.distributed as dist
import torch.nn.functional as F
from dplab.timing import Z
from dplab.timing import in_band
from dplab.timing import interleaved
from dplab.timing import measured
from dplab.timing import median_se
from dplab.trace import covered_within
from dplab.trace import union_length
from labcode.formulas import overlap_step_time
from labcode.overlap import make_step


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
class StepTimeline:
    # This rank's steps as events (dplab.trace's form): forward, backward, and each
    # bucket's all-reduce from launch to finish. On a GPU a mark is a CUDA event on the
    # current stream; events() reads them, in seconds, after a sync.
    def __init__(self, rank, device):
        self.rank, self.cuda = rank, device.type == "cuda"
        self.origin = self.mark()
        self.clear()

    def clear(self):
        self.step, self.spans = 0, []

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def span(self, lane, name, start, end):
        self.spans.append((self.step, lane, name, start, end))

    def seconds(self, m):
        return self.origin.elapsed_time(m) / 1e3 if self.cuda else m - self.origin

    def events(self):
        if self.cuda:
            torch.cuda.synchronize()
        return [dict(rank=self.rank, step=s, lane=lane, name=name,
                     start=self.seconds(a), end=self.seconds(b))
                for s, lane, name, a, b in self.spans]


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def timed_allreduce_hook(timeline, group=None):
    # DDP's own averaging as a comm hook, with each bucket's launch and finish marked.
    # The finish is marked in the future's callback, which runs once the all-reduce is
    # done (on a GPU, on a stream that waits for it).
    p = dist.get_world_size(group)

    def hook(state, bucket):
        start = timeline.mark()
        flat = bucket.buffer().div_(p)
        fut = dist.all_reduce(flat, group=group, async_op=True).get_future()

        def done(fut):
            end = timeline.mark()
            timeline.span("all-reduce", f"bucket {bucket.index()}", start, end)
            return fut.value()[0]
        return fut.then(done)
    return hook


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def traced_step(x, y, device, cap, group=None):
    # make_step("ddp", ...) with the timed hook: the model, the step, and the
    # StepTimeline to which each call of the step adds its events.
    model, _ = make_step("ddp", x, y, device, cap, group)
    timeline = StepTimeline(dist.get_rank(), device)
    model.register_comm_hook(None, timed_allreduce_hook(timeline, group))
    last = {}                                   # the last gradient marks backward's end
    for q in model.parameters():
        q.register_post_accumulate_grad_hook(lambda q: last.update(t=timeline.mark()))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        t0 = timeline.mark()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        t1 = timeline.mark()
        loss.backward()                         # DDP waits for its buckets in here
        opt.step()
        timeline.span("compute", "forward", t0, t1)
        timeline.span("compute", "backward", t1, last["t"])
        timeline.span("step", "step", t0, timeline.mark())
        timeline.step += 1
    return model, step, timeline


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def timeline_facts(events):
    # Each (rank, step) of a traced run: the step's length; backward's end; the time the
    # all-reduces were in flight; the fraction of it spent while backward computed
    # (overlap); the all-reduce time left after backward (exposed), in seconds. Also
    # the buckets in launch order, and whether every all-reduce lay between forward's
    # end and the step's end.
    facts = {}
    for e in events:
        facts.setdefault((e["rank"], e["step"]), []).append(e)
    for key, mine in facts.items():
        get = {(e["lane"], e["name"]): e for e in mine}
        step, fwd = get["step", "step"], get["compute", "forward"]
        bwd = get["compute", "backward"]
        comm = sorted((e["start"], e["end"], e["name"])
                      for e in mine if e["lane"] == "all-reduce")
        spans = [(a, b) for a, b, _ in comm]
        flight = union_length(spans)
        facts[key] = dict(
            length=step["end"] - step["start"], backward_end=bwd["end"] - step["start"],
            comm=flight, launched=[name for *_, name in comm],
            overlap=covered_within(spans, (fwd["start"], bwd["end"])) / flight
            if flight else 0.0,
            exposed=max([b for _, b in spans] + [bwd["end"]]) - bwd["end"],
            within=all(fwd["end"] <= a <= b <= step["end"] for a, b in spans))
    return facts


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def slowest_per_step(facts, key):
    # For each step in order, the largest `key` over the ranks (of a length or an
    # exposed time: the slowest rank's).
    steps = sorted({s for _, s in facts})
    return np.array([max(f[key] for (_, s2), f in facts.items() if s2 == s)
                     for s in steps])


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def slowest_rank_times(fns, repeats, device, group=None):
    # Seconds of every step in every repeat, the steps taking turns (interleaved) so
    # that a slow moment of the machine hits them all; each value is the slowest
    # rank's, as a step costs what its slowest rank took. dplab.timing's
    # ranks_interleaved does the same but keeps only the median of the repeats.
    sync = torch.cuda.synchronize if device.type == "cuda" else None

    def start(name):                      # untimed: the ranks start each step together
        dist.barrier(group=group)
        if sync:
            sync()

    times = interleaved(fns, repeats, warmup=0, before=start, sync=sync)
    table = torch.tensor(
        [times[n].tolist() for n in fns], dtype=torch.float64, device=device
    )
    dist.all_reduce(table, op=dist.ReduceOp.MAX, group=group)
    return dict(zip(fns, table.cpu().tolist()))


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
REPEATS = 15


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
TOL = 0.15


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def paired_ratio(times, reference):
    # Median over the repeats of times[i] / reference[i]. The two steps of repeat i ran
    # moments apart, so a slow moment of the machine slows both and cancels.
    return float(np.median(np.asarray(times) / np.asarray(reference)))


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def ratio_tolerance(per_step, reference, names):
    # The noise reference (the `reference` step timed again, under the name "<reference>
    # again", over the first) and the tolerance on the paired ratios of `names` to
    # `reference`, from the noise measured beside them: TOL, or on a noisier machine
    # three times the noise reference's distance from 1, or Z standard errors of a
    # ratio's median, whichever is largest.
    noise = paired_ratio(per_step[f"{reference} again"], per_step[reference])
    ref = np.asarray(per_step[reference])
    spread = max(Z * median_se(np.asarray(per_step[n]) / ref) for n in names)
    return noise, max(TOL, 3 * abs(noise - 1), spread)


# From labs/04_ddp.ipynb, section "Measure: what overlap buys".
def overlapped_ratio(compute_s, forward_s, one_bucket_s, bucket_bytes):
    # The step with these buckets over the step with one bucket, if the all-reduces run
    # on a resource of their own (overlap_step_time, the DDP chapter's model). The
    # all-reduce and backward are split among the buckets, in launch order, by bytes.
    share = np.asarray(bucket_bytes, dtype=float) / sum(bucket_bytes)
    comm = max(one_bucket_s - compute_s, 0.0) * share  # each bucket's all-reduce
    compute = (compute_s - forward_s) * share           # backward, last layers first
    compute[0] += forward_s                             # bucket 1 waits for forward
    return overlap_step_time(compute, comm) / one_bucket_s


# From labs/04_ddp.ipynb, section "Your own timeline", "The check".
def exposed_per_step(facts):
    # For each step in order, the all-reduce time left after backward on the rank that
    # ended backward last (the other ranks' exposed time includes waiting for it)
    steps = sorted({s for _, s in facts})
    return np.array([min(f["exposed"] for (_, s2), f in facts.items() if s2 == s)
                     for s in steps])


# From labs/04_ddp.ipynb, section "Your own timeline", "The check".
def check_timeline(facts, n_buckets, timed, tol, comm=None):
    # Assert what the plot shows: the slowest rank's steps match `timed`, the same steps
    # as the timing loop measured them (the median ratio within tol). Given `comm`, an
    # all-reduce of all the gradients timed alone beside each step, the exposed time of
    # the rank that ended backward last is printed against it, a measurement: rank skew,
    # which a busy core adds and the all-reduce alone has none of, moves it about as
    # far as marks taken at the wrong instant would.
    ratio = np.median(slowest_per_step(facts, "length") / np.asarray(timed))
    name = f"{n_buckets} bucket(s)"
    assert in_band(f"{name}: timeline steps / timed steps", ratio, 1 - tol, 1 + tol), \
        f"timeline steps {ratio:.2f} x the timed ones"
    if comm is not None:
        gaps = (exposed_per_step(facts) - comm) / np.asarray(timed)
        return measured(f"{name}: (exposed - all-reduce alone) / step", np.median(gaps))


# From labs/04_ddp.ipynb, section "Your own timeline", "The check".
def saved_by_buckets(several, one):
    # The exposed all-reduce time that buckets save against one bucket, step by step
    # (the two runs took turns): the median, in seconds. Where communication has a
    # resource of its own, the overlapped model predicts how much; all-reduces held
    # back until backward ends would save nothing.
    return float(np.median(exposed_per_step(one) - exposed_per_step(several)))
