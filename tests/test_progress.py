"""Progress output (spirula/progress.py): a tqdm bar on a terminal, plain
lines without carriage returns elsewhere (CI logs, pipes)."""

import io

import pytest

from spirula import progress
from spirula.progress import TrainProgress, track


def _out(step, n_splats=1234, loss=0.25, mse=0.01):
    return dict(loss=loss, mse=mse, n_splats=n_splats, l1=0.0, ssim=0.0, n_isects=0)


def test_training_progress_off_a_terminal_is_one_plain_line_every_n_steps():
    stream = io.StringIO()
    p = TrainProgress(10, every=4, stream=stream)  # StringIO: not a terminal
    for s in range(1, 11):
        p.update(s, _out(s))
    p.close()
    text = stream.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert [ln.split("|")[0] for ln in lines] == ["step  4/10 ", "step  8/10 ", "step 10/10 "]
    assert lines[-1].endswith("|     1,234 splats | loss 0.2500 | PSNR 20.00")
    assert "steps/s" in lines[0]


def test_training_progress_on_a_terminal_is_a_tqdm_bar():
    stream = io.StringIO()
    p = TrainProgress(10, start=2, every=4, stream=stream, isatty=True)
    assert p.bar is not None and p.bar.n == 2  # a resumed run starts where it was
    for s in range(3, 11):
        p.update(s, _out(s))
    p.test_psnr = 23.456
    p.update(10, _out(10))
    messages = []
    p.message(messages.append, "spirula: step 10: test PSNR 23.456")
    assert p.bar.n == 10 and messages == ["spirula: step 10: test PSNR 23.456"]
    p.close()
    text = stream.getvalue()
    assert "\r" in text  # redrawn in place
    last = text.rsplit("\r", 1)[-1]
    for part in ("10/10", "step/s", "1,234 splats", "loss 0.2500", "PSNR 20.00", "test PSNR 23.46"):
        assert part in last, (part, last)
    assert "step  4/10 |" not in text  # no plain lines as well


def test_short_loops_off_a_terminal_print_nothing():
    stream = io.StringIO()
    assert list(track(range(5), "evaluating", stream=stream)) == list(range(5))
    assert stream.getvalue() == ""


def test_long_loops_off_a_terminal_print_plain_lines(monkeypatch):
    monkeypatch.setattr(progress, "TRACK_INTERVAL", 0.0)
    stream = io.StringIO()
    assert list(track(iter("abc"), "rendering", total=3, stream=stream)) == ["a", "b", "c"]
    assert stream.getvalue().splitlines() == [
        "spirula: rendering 0/3",
        "spirula: rendering 1/3",
        "spirula: rendering 2/3",
    ]


def test_loops_on_a_terminal_show_a_bar_that_goes_away():
    stream = io.StringIO()
    assert list(track([1, 2, 3], "evaluating", unit="view", stream=stream, isatty=True)) == [1, 2, 3]
    text = stream.getvalue()
    assert "evaluating" in text and "\r" in text


@pytest.mark.parametrize("closed", [False, True])
def test_a_stream_without_a_terminal_is_not_one(closed):
    stream = io.StringIO()
    if closed:
        stream.close()
    assert not progress.is_terminal(stream)
    assert not progress.is_terminal(object())


def test_a_line_written_during_a_bar_keeps_the_bar_whole():
    stream = io.StringIO()
    items = track([1, 2], "rendering", stream=stream, isatty=True)
    next(items)
    progress.write("out/0000.png", file=stream)
    list(items)
    text = stream.getvalue()
    assert "out/0000.png\n" in text and text.index("out/0000.png") > text.index("rendering")
