import io

from hotloop.progress import Progress


def test_off_a_terminal_progress_is_a_few_plain_lines():
    stream = io.StringIO()  # a pipe or a log file: not a terminal
    with Progress(1000, "eval sync", "ep", stream=stream) as bar:
        for i in range(1000):
            bar.update(1, f"success {i + 1}/{i + 1}")
    text = stream.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and len(lines) == 10  # one line per tenth, not one per update
    assert lines[0].startswith("eval sync: 100/1000 ep (10%), success 100/100")
    assert lines[-1].startswith("eval sync: 1000/1000 ep (100%), success 1000/1000")


def test_disabled_progress_prints_nothing():
    stream = io.StringIO()
    with Progress(5, "x", stream=stream, enabled=False) as bar:
        bar.update(5)
    assert stream.getvalue() == "" and bar.n == 5


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_it_is_a_live_bar_that_clears_itself():
    stream = _Terminal()
    with Progress(3, "record reach", "ep", stream=stream) as bar:
        bar.update(3)
    assert "\r" in stream.getvalue() and "record reach" in stream.getvalue()
