"""Generated from labs/06_transformer_ddp.ipynb by tools/export_labs.py: do not edit.

Change the lab, then run `python tools/export_labs.py`; a test fails while the two differ.
"""
import math
import random
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from torch.utils.data import DistributedSampler


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
VOCAB = ["<pad>", "<sos>", "<eos>"] + [str(d) for d in range(10)] + WORDS


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
TOKEN = {t: i for i, t in enumerate(VOCAB)}


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
PAD = TOKEN["<pad>"]


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
SOS = TOKEN["<sos>"]


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
EOS = TOKEN["<eos>"]


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
MAX_DIGITS = 5


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
N_TRAIN = 8000


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
N_TEST = 500


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
GLOBAL_BATCH = 128                   # sequences per optimizer step, whatever p is


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
def to_words(number):
    return " ".join(WORDS[int(d)] for d in number)


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
def number_split(n_train, n_test, seed=0):
    # Distinct numbers whose length (1 to MAX_DIGITS digits) is uniform; the last n_test
    # are held out.
    rng, seen, numbers = random.Random(seed), set(), []
    while len(numbers) < n_train + n_test:
        k = rng.randint(1, MAX_DIGITS)
        s = str(rng.randrange(10 ** (k - 1) if k > 1 else 0, 10 ** k))
        if s not in seen:
            seen.add(s)
            numbers.append(s)
    return numbers[:n_train], numbers[n_train:]


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
def encode(number):
    # (source ids, target ids): digits -> <sos> words <eos>
    src = torch.tensor([TOKEN[c] for c in number])
    tgt = torch.tensor([SOS] + [TOKEN[w] for w in to_words(number).split()] + [EOS])
    return src, tgt


# From labs/06_transformer_ddp.ipynb, section "1. The task: numbers to words".
def pad_collate(batch):
    # A list of (src, tgt) pairs -> two (batch, longest) tensors, padded with PAD.
    srcs, tgts = zip(*batch)
    pad = lambda seqs: nn.utils.rnn.pad_sequence(
        seqs, batch_first=True, padding_value=PAD
    )
    return pad(srcs), pad(tgts)


# From labs/06_transformer_ddp.ipynb, section "2. The model, with its masks".
class NumberToWords(nn.Module):
    def __init__(self, d_model=64, nhead=4, layers=2, ff=128, seed=0):
        super().__init__()
        self.d_model = d_model
        # the same weights on every rank and here
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Embedding(len(VOCAB), d_model, padding_idx=PAD)
            self.pos = nn.Embedding(MAX_DIGITS + 2, d_model)
            kw = dict(dropout=0.0, batch_first=True, bias=False)
            enc = nn.TransformerEncoderLayer(d_model, nhead, ff, **kw)
            dec = nn.TransformerDecoderLayer(d_model, nhead, ff, **kw)
            self.encoder = nn.TransformerEncoder(
                enc,
                layers,
                nn.LayerNorm(d_model, bias=False),
                enable_nested_tensor=False,
            )
            self.decoder = nn.TransformerDecoder(
                dec, layers, nn.LayerNorm(d_model, bias=False)
            )
            self.out = nn.Linear(d_model, len(VOCAB), bias=False)

    def tokens(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.embed(ids) * math.sqrt(self.d_model) + self.pos(positions)

    def encode(self, src):
        return self.encoder(self.tokens(src), src_key_padding_mask=src == PAD)

    def decode(self, memory, src, tgt_in):
        T = tgt_in.shape[1]
        # True: may not attend
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tgt_in.device), 1)
        h = self.decoder(
            self.tokens(tgt_in),
            memory,
            tgt_mask=causal,
            tgt_is_causal=True,
            tgt_key_padding_mask=tgt_in == PAD,
            memory_key_padding_mask=src == PAD,
        )
        return self.out(h)

    def forward(self, src, tgt_in):
        return self.decode(self.encode(src), src, tgt_in)


# From labs/06_transformer_ddp.ipynb, section "2. The model, with its masks".
@torch.no_grad()
def greedy(model, src):
    # Decode a batch token by token, always taking the most likely next token.
    memory = model.encode(src)
    out = torch.full((src.shape[0], 1), SOS, device=src.device)
    for _ in range(MAX_DIGITS + 1):
        nxt = model.decode(memory, src, out)[:, -1].argmax(-1)
        out = torch.cat([out, nxt[:, None]], 1)
    return out


# From labs/06_transformer_ddp.ipynb, section "2. The model, with its masks".
def exact_match(model, numbers, device):
    # Fraction of `numbers` whose greedy decoding is exactly their words, then <eos>.
    was = model.training
    model.eval()
    src, _ = pad_collate([encode(s) for s in numbers])
    hits = 0
    for number, row in zip(numbers, greedy(model, src.to(device)).tolist()):
        end = row.index(EOS) if EOS in row else len(row)
        hits += " ".join(VOCAB[t] for t in row[1:end]) == to_words(number)
    model.train(was)
    return hits / len(numbers)


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
D_MODEL = 64                        # the lab's Noam schedule: d, w and the factor f


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
WARMUP = 25


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
NOAM_FACTOR = 0.25


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
PAPER_D_MODEL = 512                 # Vaswani et al. 2017, base model: d_model


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
PAPER_WARMUP = 4000                 # (Section 3.1), warmup_steps (Section 5.3) and


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
PAPER_STEPS = 100_000               # training steps (Section 5.2)


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
def noam(step, d_model, warmup, factor=1.0):
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
def noam_schedule(opt, d_model, warmup, factor=1.0):
    # opt was created with lr=1.0: step s (from 1) uses noam(s).
    return LambdaLR(opt, lambda s: noam(s + 1, d_model, warmup, factor))


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
def amp_dtype_for(device):
    return torch.float16 if device.type == "cuda" else torch.bfloat16


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
def make_adamw(model, lr=1.0):
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
def train_step(model, opt, sched, scaler, src, tgt, amp_dtype=None, clip=1.0,
               group=None):
    # One step on this rank's share; returns (loss over the global batch, gradient
    # norm, lr used).
    dev = src.device
    with torch.autocast(
        dev.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None
    ):
        logits = model(src, tgt[:, :-1])
    gold = tgt[:, 1:]
    # at least fp32: autocast's fp16/bf16 logits go up to fp32, float64 stays float64
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    loss_sum = F.cross_entropy(
        logits.flatten(0, 1), gold.flatten(), ignore_index=PAD, reduction="sum"
    )
    totals = torch.stack([loss_sum.detach(), (gold != PAD).sum().to(loss_sum.dtype)])
    ranks = 1
    if isinstance(model, DDP):
        dist.all_reduce(totals, group=group)
        ranks = dist.get_world_size(group)
    opt.zero_grad(set_to_none=True)
    # DDP averages: the global token mean
    scaler.scale(loss_sum * ranks / totals[1]).backward()
    scaler.unscale_(opt)
    norm = nn.utils.clip_grad_norm_(model.parameters(), clip)
    lr = opt.param_groups[0]["lr"]
    scaler.step(opt)  # skipped if fp16 gradients overflowed
    scaler.update()
    sched.step()
    return (totals[0] / totals[1]).item(), norm.item(), lr


# From labs/06_transformer_ddp.ipynb, section "3. The training step: Noam, clipping, mixed precision".
def train(model, opt, sched, data, per_rank, epochs=1, steps=None, amp_dtype=None,
          clip=1.0, group=None):
    # DistributedSampler shards every epoch (set_epoch reshuffles); returns one
    # (loss, norm, lr) per step.
    dev = next(model.parameters()).device
    ddp = isinstance(model, DDP)
    sampler = DistributedSampler(
        data,
        num_replicas=dist.get_world_size(group) if ddp else 1,
        rank=dist.get_rank(group) if ddp else 0,
        shuffle=True,
        seed=0,
    )
    loader = DataLoader(
        data, batch_size=per_rank, sampler=sampler, collate_fn=pad_collate
    )
    scaler = torch.amp.GradScaler(dev.type, enabled=amp_dtype == torch.float16)
    log = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for src, tgt in loader:
            log.append(train_step(model, opt, sched, scaler, src.to(dev), tgt.to(dev),
                                  amp_dtype, clip, group))
            if steps is not None and len(log) == steps:
                return log
    return log


# From labs/06_transformer_ddp.ipynb, section "9. Half the bytes: a compression hook".
def compress_hook(dtype):
    # A DDP comm hook: all-reduce each bucket in `dtype`; hook.sent lists the bytes
    # of each all-reduce.
    def hook(group: dist.ProcessGroup,
             bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = group or dist.group.WORLD
        low = bucket.buffer().to(dtype).div_(group.size())
        hook.sent.append(low.numel() * low.element_size())
        fut = dist.all_reduce(low, group=group, async_op=True).get_future()
        return fut.then(lambda f: bucket.buffer().copy_(f.value()[0]))
    hook.sent = []
    return hook
