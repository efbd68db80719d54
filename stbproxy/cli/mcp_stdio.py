"""``stbproxy mcp-stdio``: a stdio MCP server with the proxy in front of it.

An MCP client configured with ``stbproxy mcp-stdio [options] -- COMMAND ARGS...`` instead
of ``COMMAND ARGS...`` talks to the proxy over stdin/stdout; the proxy answers from the
store and starts COMMAND only for what the store cannot answer (mcp/stdio.py), with the
same rules, store, sessions, simulator and faults as ``serve``. The child's stderr is
this process's; its exit status is this command's. Nothing but MCP messages is written to
standard output: everything the proxy says goes to standard error.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stbproxy.cli.common import fail, missing_roots, remove_new, store_option
from stbproxy.cli.shared_tier import shared_option

if TYPE_CHECKING:
    from stbproxy.settings import Settings

log = logging.getLogger("stbproxy")


@click.command(name="mcp-stdio", context_settings={"ignore_unknown_options": False})
@click.option("--mode", type=click.Choice(["virtual", "record", "replay"]), default="virtual", show_default=True,
              help="virtual: the store, else the server, else the simulator; record: always the server; "
                   "replay: the store only (the server is never started).")
@store_option
@click.option("--session", default=None, metavar="NAME", help="Session of this client's calls [default: one per run].")
@click.option("--simulator", type=click.Choice(["auto", "llm", "schema", "off"]), default="auto", show_default=True,
              help="Who answers a tools/call the server cannot (as serve's --simulator).")
@click.option("--sim-model", default=None, help="The simulator's model.")
@click.option("--faults", "faults", multiple=True, metavar="SPEC",
              help="Inject failures into tool calls, e.g. down=0.2, tool-error,tool=search*, rpc-error,p=0.1.")
@click.option("--fault-seed", type=int, default=0, show_default=True, help="The seed of fault decisions.")
@click.option("--validity", type=click.Choice(["auto", "stb", "strict"]), default="auto", show_default=True,
              help="auto: a server error or isError result is a failed answer; strict: every answer counts.")
@click.option("--timeout", "timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds to wait for the server's answer to one request.")
@click.option("--allow-empty", is_flag=True, help="Replay: start even when the store holds nothing.")
@click.option("-v", "--verbose", count=True, help="Log each miss and the server's start to standard error.")
@shared_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- COMMAND [ARGS]...")
def mcp_stdio(mode, store, session, simulator, sim_model, faults, fault_seed, validity, timeout, allow_empty,
              verbose, shared, command):
    """Run a stdio MCP server behind the proxy: record, replay (without starting the server
    when every answer is stored) and simulate, as serve does over HTTP.

    \b
    Example, in an MCP client's configuration:
      "command": "stbproxy", "args": ["mcp-stdio", "--store", "runs/store", "--", "python", "server.py"]
    """
    from stbproxy.errors import StbError
    from stbproxy.models import Mode
    from stbproxy.sessions import default_session_name
    from stbproxy.settings import Settings

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
                        level=logging.WARNING)
    log.setLevel(logging.INFO if verbose else logging.WARNING)
    try:
        settings = Settings(store=Path(store), mode=Mode(mode), session=session, simulator=simulator,
                            sim_model=sim_model, faults=tuple(faults), fault_seed=fault_seed, validity=validity,
                            upstream_timeout=timeout, allow_empty=allow_empty, shared=shared)
    except StbError as exc:
        fail(str(exc))
    new_paths = missing_roots(Path(store))  # what a refused start made is removed again
    try:
        code = asyncio.run(_serve(settings, list(command), session or default_session_name(command="stdio"),
                                  new_paths))
    except StbError as exc:
        fail(str(exc))
    sys.exit(code)


async def _serve(settings: Settings, argv: list[str], session: str, new_paths: list[tuple[Path, Path]]) -> int:
    from stbproxy.errors import StbError
    from stbproxy.mcp import jsonrpc
    from stbproxy.mcp.protocol import stdio_url
    from stbproxy.mcp.stdio import READ_LIMIT, StdioServer
    from stbproxy.models import Request
    from stbproxy.runtime import Runtime

    loop = asyncio.get_running_loop()
    out = sys.stdout.buffer
    writing = asyncio.Lock()

    async def to_client(line: bytes) -> None:
        async with writing:
            out.write(line + b"\n")
            out.flush()

    server = StdioServer(argv, to_client, timeout=settings.upstream_timeout)
    try:
        runtime = Runtime(settings, upstream=server)
    except StbError:
        remove_new(new_paths)  # a refused start leaves nothing behind
        raise
    await runtime.ready()
    url = stdio_url(argv)
    reader = asyncio.StreamReader(limit=READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    async def answer(line: bytes) -> None:
        message = jsonrpc.read(line)
        if message.kind in (jsonrpc.INVALID, jsonrpc.BATCH):  # nothing to key, store or pass on
            code = jsonrpc.PARSE_ERROR if message.why.startswith("not JSON") else jsonrpc.INVALID_REQUEST
            await to_client(jsonrpc.error_body(None, code, f"stbproxy: not a JSON-RPC message of MCP's: {message.why}"))
            return
        if message.kind == jsonrpc.REQUEST and message.method == "initialize":
            server.initialize = line  # for a server started later, after the store answered this
        request = Request("POST", url, (("Content-Type", "application/json"),), line)
        try:
            answered = await runtime.engine.handle(request, session)
        except Exception:  # one bad message must never end the others
            log.exception("stbproxy failed on a message from the MCP client")
            if message.kind == jsonrpc.REQUEST:
                await to_client(jsonrpc.error_body(message.id, jsonrpc.INTERNAL_ERROR, "stbproxy internal error"))
            return
        if message.kind == jsonrpc.REQUEST:
            first = True
            async for out in _lines_of(answered, message.id):
                if not first:  # one message per read, as a server writes them (the module's PACE)
                    await asyncio.sleep(PACE)
                await to_client(out)
                first = False

    pending: set[asyncio.Task] = set()
    stop = asyncio.ensure_future(stopping.wait())
    try:
        while True:
            read = asyncio.ensure_future(reader.readline())
            done, _ = await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
            if stop in done:
                read.cancel()
                break
            try:
                line = read.result()
            except (ValueError, asyncio.LimitOverrunError):
                log.warning("stbproxy: a message over %d bytes from the MCP client; stopped reading", READ_LIMIT)
                break
            if not line:
                break  # the client closed our input: its session is over
            line = line.strip()
            if line:
                task = asyncio.ensure_future(answer(line))
                pending.add(task)
                task.add_done_callback(pending.discard)
        if pending and not stopping.is_set():
            await asyncio.wait(pending, timeout=settings.upstream_timeout)
    finally:
        stop.cancel()
        for task in pending:
            task.cancel()
        await runtime.aclose()  # closes the server (stdin first, as MCP clients do) and the store
    if server.start_error is not None:  # a command that cannot run: as a shell says it, after the session
        click.echo(f"stbproxy: error: {server.start_error}", err=True)
        return COMMAND_NOT_RUN
    return _exit_status(server.returncode)


async def _lines_of(answered, message_id):
    """The lines that answer a request: a stored stream's messages in order (played as they go
    when the server asked the client something), or of a live answer only its last one (the
    server's other lines reached the client as it wrote them); an answer that is no JSON-RPC
    message (an HTTP-shaped error) as the JSON-RPC error it stands for."""
    from stbproxy.mcp import jsonrpc, sse
    from stbproxy.models import Source

    response = answered.response
    if answered.stream is not None:
        async for line in _streamed(answered.stream):
            yield line
        return
    body = response.body.strip()
    if sse.is_event_stream(response.header("content-type")):
        blocks = [block for block, _ in sse.blocks_with_separators(body)]
        if answered.source is not Source.CACHE:
            blocks = [block for block in blocks if sse.is_answer_block(block)]
        for message in _data_of(blocks):
            yield jsonrpc.one_line(message)
        return
    if not body:
        return
    if jsonrpc.answer_of(body) is None:
        text = body.decode("utf-8", "replace")[:500]
        body = jsonrpc.error_body(message_id, -32011, f"stbproxy: no answer: {text}")
    yield jsonrpc.one_line(body)


async def _streamed(stream):
    """Each message of a stream played as it goes, as one line."""
    from stbproxy.mcp import jsonrpc, sse

    pending = b""
    try:
        async for chunk in stream.chunks():
            blocks, pending = sse.split_blocks(pending + chunk)
            for message in _data_of(blocks):
                yield jsonrpc.one_line(message)
        for message in _data_of([pending]):
            yield jsonrpc.one_line(message)
    finally:
        await stream.aclose()


def _data_of(blocks: list[bytes]) -> list[bytes]:
    from stbproxy.mcp import sse

    found = []
    for block in blocks:
        for event in sse.events(block):
            if event.data.strip():
                found.append(event.data)
    return found


# Seconds between the messages of a stored stream: a client that handles one read's messages
# together (the TypeScript SDK, whose notification handlers run after the read) would take the
# answer before the progress that came with it, and find no one waiting for that progress.
PACE = 0.005
COMMAND_NOT_RUN = 127  # a shell's status for a command it could not run


def _exit_status(returncode: int | None) -> int:
    """The server's exit status as a shell gives it (128 + N for a signal); 0 when it never ran."""
    if returncode is None:
        return 0
    return 128 - returncode if returncode < 0 else returncode
