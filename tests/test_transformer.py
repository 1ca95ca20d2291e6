"""Lab 6's exported Transformer code (labcode.transformer): the task, the masks, Noam, the step."""
import math

import pytest
import torch
import torch.nn.functional as F

from labcode import transformer as lab


def test_number_split_covers_all_ten_digits_and_holds_out_unseen_numbers():
    train, test = lab.number_split(2000, 200)
    assert len(set(train)) == 2000 and len(set(test)) == 200 and not set(train) & set(test)
    assert {c for s in train for c in s} == set("0123456789")
    assert {len(s) for s in train} == set(range(1, lab.MAX_DIGITS + 1))


def test_encode_maps_every_digit_to_its_word():
    src, tgt = lab.encode("9876543210")
    words = [lab.VOCAB[t] for t in tgt[1:-1].tolist()]
    assert words == ["nine", "eight", "seven", "six", "five", "four", "three", "two", "one", "zero"]
    assert tgt[0] == lab.SOS and tgt[-1] == lab.EOS and len(src) == 10


def test_pad_collate_pads_to_the_longest_sequence_with_pad():
    src, tgt = lab.pad_collate([lab.encode("7"), lab.encode("123")])
    assert src.tolist() == [[lab.TOKEN["7"], lab.PAD, lab.PAD], [lab.TOKEN[c] for c in "123"]]
    assert tgt.shape == (2, 5) and tgt[0, 3:].tolist() == [lab.PAD, lab.PAD]


def test_padding_does_not_change_a_sequences_output():
    net = lab.NumberToWords().eval()
    with torch.no_grad():
        s1, t1 = lab.pad_collate([lab.encode("42")])
        alone = net(s1, t1[:, :-1])
        sb, tb = lab.pad_collate([lab.encode("42"), lab.encode("31415")])
        batched = net(sb, tb[:, :-1])[:1, : alone.shape[1]]
    assert (alone - batched).abs().max() < 1e-5


def test_causal_mask_hides_later_target_tokens():
    net = lab.NumberToWords().eval()
    s, t = lab.pad_collate([lab.encode("305")])
    t2 = t.clone()
    t2[0, 2] = lab.TOKEN["nine"]
    with torch.no_grad():
        a, b = net(s, t[:, :-1]), net(s, t2[:, :-1])
    assert torch.equal(a[:, :2], b[:, :2]) and (a[:, 2:] - b[:, 2:]).abs().max() > 1e-3


def test_noam_schedule_peaks_at_warmup_and_the_first_step_is_not_zero():
    net = lab.NumberToWords()
    opt = lab.make_adamw(net)
    sched = lab.noam_schedule(opt, 64, 10)
    used = []
    for _ in range(40):
        used.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert used[0] == lab.noam(1, 64, 10) > 0
    assert max(range(40), key=used.__getitem__) + 1 == 10
    assert math.isclose(used[9], 64 ** -0.5 * 10 ** -0.5)


def test_train_step_loss_is_the_mean_over_target_tokens_and_clips_to_the_threshold():
    net = lab.NumberToWords()
    opt = lab.make_adamw(net, lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    src, tgt = lab.pad_collate([lab.encode(s) for s in ["1", "22", "333"]])
    with torch.no_grad():
        want = F.cross_entropy(net(src, tgt[:, :-1]).flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=lab.PAD)
    off = torch.amp.GradScaler("cpu", enabled=False)
    loss, norm, lr = lab.train_step(net, opt, sched, off, src, tgt, None, clip=1e-3)
    clipped = math.sqrt(sum(float(q.grad.pow(2).sum()) for q in net.parameters()))
    assert loss == pytest.approx(float(want), rel=1e-6) and norm > 1e-3
    assert clipped == pytest.approx(1e-3, rel=1e-4)


def test_train_step_keeps_a_float64_loss_in_float64_and_lifts_autocast_logits_to_fp32():
    src, tgt = lab.pad_collate([lab.encode(s) for s in ["1", "22", "333"]])
    off = torch.amp.GradScaler("cpu", enabled=False)
    net = lab.NumberToWords().double()
    opt = lab.make_adamw(net, lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    with torch.no_grad():
        want = F.cross_entropy(net(src, tgt[:, :-1]).flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=lab.PAD)
    loss, _, _ = lab.train_step(net, opt, sched, off, src, tgt, None)
    assert want.dtype == torch.float64 and loss == pytest.approx(float(want), rel=1e-13)
    net = lab.NumberToWords()
    opt = lab.make_adamw(net, lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = net(src, tgt[:, :-1])
    want = F.cross_entropy(logits.float().flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=lab.PAD)
    loss, _, _ = lab.train_step(net, opt, sched, off, src, tgt, torch.bfloat16)
    assert logits.dtype == torch.bfloat16 and loss == pytest.approx(float(want), rel=1e-6)


def chapter_parameter_count(text: str) -> int:
    """The parameters that Mixed precision counts from the architecture (its `tb_params`), run
    from the chapter's own lines: the chapter states the formula instead of importing Lab 6."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("d, ff, layers, vocab, positions ="))
    end = next(i for i, line in enumerate(lines) if line.startswith("tb_params ="))
    scope: dict = {}
    exec("\n".join(lines[start:end + 1]), scope)  # noqa: S102 (the book's own page)
    return scope["tb_params"]


def test_mixed_precisions_count_of_the_benchmarked_model_is_lab_6s():
    """The chapter's count must follow Lab 6's model; a layer more in the lab, or a wrong term in
    the chapter (the broken variants), would part them."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "chapters" / "mixed_precision.md").read_text()
    def count(model):
        return sum(q.numel() for q in model.parameters())

    assert chapter_parameter_count(text) == count(lab.NumberToWords())
    no_cross_attention = text.replace("decoder = encoder + 4 * d * d + d", "decoder = encoder + d")
    assert chapter_parameter_count(no_cross_attention) != count(lab.NumberToWords())
    assert chapter_parameter_count(text) != count(lab.NumberToWords(layers=3))
