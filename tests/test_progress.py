"""Progress output (spirula/progress.py): a tqdm bar on a terminal, plain
lines without carriage returns elsewhere (CI logs, pipes)."""

import io
import os

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


def test_work_reported_as_it_goes_off_a_terminal_prints_plain_lines(monkeypatch):
    monkeypatch.setattr(progress, "TRACK_INTERVAL", 0.0)
    stream = io.StringIO()
    with progress.Bar(None, "sfm match", stream=stream) as bar:
        bar.update_to(1, total=4)  # the total known only from the first report
        bar.update_to(1)  # no news: no line
        bar.update(2)
        bar.update_to(2)  # never goes back
    assert stream.getvalue().splitlines() == ["spirula: sfm match 1/4", "spirula: sfm match 3/4"]


def test_work_reported_as_it_goes_on_a_terminal_is_a_bar_that_goes_away():
    stream = io.StringIO()
    bar = progress.Bar(10, "colouring texture", unit="face", stream=stream, isatty=True)
    bar.update_to(4)
    assert bar.bar.n == 4
    bar.close()
    text = stream.getvalue()
    assert "colouring texture" in text and "\r" in text


def test_ansi_codes_are_stripped():
    coloured = "\x1b[36m(train_block pid=7)\x1b[0m step 1/2 \x1b[2K\x1b]0;title\x07done"
    assert progress.strip_ansi(coloured) == "(train_block pid=7) step 1/2 done"


# Output as libraries write it: Python's print, C-level writes to fd 1 and 2
# (glog), a child process, colours, a carriage return, no final newline.
_CAPTURED = """
import os, subprocess, sys
from spirula import progress
seen = []
with progress.capture_output(sys.argv[1], echo=sys.argv[2] == "echo", on_line=seen.append) as cap:
    print("python stdout")
    print("python stderr", file=sys.stderr)
    os.write(2, b"\\x1b[36m(f pid=1)\\x1b[0m coloured\\nE20260101 sfm.cc:310] Failed to create any sparse model\\n")
    os.write(1, b"50%\\r100%\\n")
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('child, unfinished')"], check=True)
    cap.stream.write("for the user\\n")  # the real stderr, past the capture
print("after", len(seen))  # stdout is the process's own again
"""


@pytest.mark.parametrize("echo", [False, True])
def test_library_output_goes_to_the_log_file_and_only_with_echo_to_stderr(tmp_path, echo):
    import subprocess
    import sys

    from conftest import ROOT

    log = tmp_path / "run.log"
    log.write_text("earlier line\n")
    proc = subprocess.run(
        [sys.executable, "-c", _CAPTURED, str(log), "echo" if echo else "quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.returncode == 0, proc.stderr
    expected = [
        "python stdout",
        "python stderr",
        "(f pid=1) coloured",
        "E20260101 sfm.cc:310] Failed to create any sparse model",
        "50%",
        "100%",
        "child, unfinished",
    ]
    assert log.read_text().splitlines() == ["earlier line"] + expected  # appended, no ANSI codes
    assert proc.stdout == "after 7\n"
    assert "for the user" in proc.stderr.splitlines()
    shown = [ln for ln in proc.stderr.splitlines() if ln != "for the user"]
    assert shown == (expected if echo else [])  # stderr is a pipe here: no codes there either
