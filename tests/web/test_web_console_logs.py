"""The Logs tab gets what is written to stdout/stderr too (ComfyUI's app/logger.py captures the
console): a pack's `print` reaches GET /internal/logs/raw and subscribers, the console still gets
every line, and the server puts the streams back when it stops."""
from __future__ import annotations

import sys
import threading

from tests.web.web_harness import receive_json, start_test_server, ws_connect
from web.routes_logs import ConsoleTee, LogBuffer, install_console_tee


async def test_a_pack_print_reaches_the_raw_logs_and_the_console(tmp_path, capsys):
    before_out, before_err = sys.stdout, sys.stderr
    server = await start_test_server(tmp_path)
    try:
        assert isinstance(sys.stdout, ConsoleTee) and isinstance(sys.stderr, ConsoleTee)
        print("[MyPack] loaded 3 models")
        print("[MyPack] a warning on stderr", file=sys.stderr)
        raw = await server.get_json("/internal/logs/raw")
        texts = [e["m"] for e in raw["entries"]]
        # one entry per write, as ComfyUI's interceptor: the text, then print's newline
        i = texts.index("[MyPack] loaded 3 models")
        assert texts[i + 1] == "\n" and "[MyPack] a warning on stderr" in texts
        assert all(set(e) == {"t", "m"} for e in raw["entries"])
        assert "[MyPack] loaded 3 models" in await server.get_json("/internal/logs")
    finally:
        await server.close()
    assert sys.stdout is before_out and sys.stderr is before_err  # restored on shutdown
    captured = capsys.readouterr()
    assert "[MyPack] loaded 3 models\n" in captured.out  # the console lost nothing
    assert "[MyPack] a warning on stderr\n" in captured.err


async def test_prints_from_other_threads_are_captured_and_streamed(tmp_path):
    # started inside the test: pytest puts its own capture back on sys.stdout between phases
    server = await start_test_server(tmp_path)
    ws, _ = await ws_connect(server, "console-client")
    try:
        async with server.session.patch(f"{server.url}/internal/logs/subscribe",
                                        json={"clientId": "console-client", "enabled": True}) as resp:
            assert resp.status == 200
        worker = threading.Thread(target=lambda: print("from a worker thread", flush=True))
        worker.start()
        worker.join()
        message = await receive_json(ws, lambda m: m["type"] == "logs"
                                     and any(e["m"] == "from a worker thread" for e in m["data"]["entries"]))
        assert message["data"]["size"] is None
    finally:
        await ws.close()
        await server.close()


class _Hub:
    loop = None
    clients: dict = {}


class _Sink:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass

    encoding = "utf-8"


def test_carriage_return_replaces_an_unfinished_line_only():
    buffer = LogBuffer(_Hub())
    tee = ConsoleTee(_Sink(), buffer)
    tee.write("progress 10%")
    tee.write("\rprogress 50%")
    tee.write("\n")
    tee.write("\rnew line after a finished one")
    assert [e["m"] for e in buffer.snapshot()] == ["\rprogress 50%", "\n", "\rnew line after a finished one"]
    assert tee.original.text == "progress 10%\rprogress 50%\n\rnew line after a finished one"
    assert tee.encoding == "utf-8"  # the rest is the original stream's


def test_restore_leaves_a_later_wrapper_in_place_and_stops_recording(monkeypatch):
    sink_out, sink_err = _Sink(), _Sink()
    monkeypatch.setattr(sys, "stdout", sink_out)
    monkeypatch.setattr(sys, "stderr", sink_err)
    buffer = LogBuffer(_Hub())
    restore = install_console_tee(buffer)
    ours = sys.stdout
    later = ConsoleTee(ours, LogBuffer(_Hub()))  # something wrapped our tee after us
    sys.stdout = later
    restore()
    assert sys.stdout is later and sys.stderr is sink_err
    print("still reaches the console")
    assert "still reaches the console" in sink_out.text
    assert not any("still reaches" in e["m"] for e in buffer.snapshot())


def test_a_missing_console_stream_stays_missing(monkeypatch):
    sink = _Sink()
    monkeypatch.setattr(sys, "stdout", None)
    monkeypatch.setattr(sys, "stderr", sink)
    buffer = LogBuffer(_Hub())
    restore = install_console_tee(buffer)
    assert sys.stdout is None and isinstance(sys.stderr, ConsoleTee)
    print("nowhere")  # print to a None stdout does nothing, as without the tee
    print("somewhere", file=sys.stderr)
    restore()
    assert sys.stdout is None and sys.stderr is sink
    assert [e["m"] for e in buffer.snapshot()] == ["somewhere", "\n"]
