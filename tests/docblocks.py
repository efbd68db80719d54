"""The commands of README.md and docs/*.md, found and run as a reader would run them.

A page's fenced blocks are read in order. Shell blocks (```sh, ```bash, ```console,
```shell) are run by bash, one process each, in one work folder per page, so a block
can use what an earlier one made. Python blocks (```python) are run the same way, by
the venv's ``python`` in that folder, imports included. A code block whose first line is
``# file: NAME`` or ``// file: NAME`` is written to NAME in that folder when its turn comes
(a recipe to save, then run by a later command).

The conventions the pages follow (docs/internals.md, "The docs are tested"):

- ``<!-- not run: REASON -->`` just before a block: the block is not run here, for the
  reason given (a hosted LLM, a real RapidAPI key, a package install); a marker
  without a reason fails the test. Before a Python block the reason starts with its kind
  (``fragment:`` or ``needs:``, see tests/house/test_docs_commands.py), and the block is still
  compiled and its imports run (:func:`import_problems`).
- ``<!-- needs: WHAT -->`` just before a block: a command (``node``) or a Python module
  (``aiohttp``) the block needs; where it is missing the block's test skips, naming it.
- A line that starts ``stbproxy serve`` is run in the background until the proxy
  prints its ready line (as a second terminal would wait for it); the next such line
  stops it first, and the page's end stops it. Other background jobs (``... &``) end
  with the page.
- ``<!-- after Ctrl-C in terminal 1 -->`` just before a block: the proxy a ``serve``
  line left running is stopped first (the block needs its store, or its port).
- ``8080`` (the proxy's default port) and ``8081`` (a second one), ``8000`` (a local API's) and ``6379`` (a local
  Redis's) are replaced by free ports; the default port is also set for ``serve``, ``env`` and ``run`` through their
  environment variables.
- In ```console blocks, lines starting ``$ `` are the commands; other lines are output.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"sh", "bash", "console", "shell"}
PYTHON = {"python", "py", "python3"}
_FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w+-]*)")
_NOT_RUN = re.compile(r"^<!--\s*not run:(.*?)-->$", re.S)
_NEEDS = re.compile(r"^<!--\s*needs:(.*?)-->$", re.S)
_AFTER_CTRL_C = re.compile(r"^<!--\s*after ctrl-c\b.*-->$", re.I | re.S)
_FILE = re.compile(r"^\s*(?:#|//)\s*file:\s*(\S+)\s*$")
_SERVE = re.compile(r"^(\s*)(?:\.venv/bin/)?stbproxy serve\b", re.M)


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    not_run: str | None = None  # the marker's reason ("" for a marker without one)
    needs: list[str] = field(default_factory=list)
    stop_serve: bool = False  # stop the proxy a serve line left running before this block
    section: str = ""  # the heading the block is under

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL

    @property
    def is_python(self) -> bool:
        return self.lang in PYTHON

    @property
    def is_command(self) -> bool:
        """A block the page's run executes: shell commands, or Python that is not a file to save."""
        return self.is_shell or (self.is_python and self.file_name is None)

    @property
    def file_name(self) -> str | None:
        first = self.code.split("\n", 1)[0]
        match = _FILE.match(first)
        return match.group(1) if match else None

    def script(self) -> str:
        """The commands, as bash runs them (a console block's prompts and output left out; a
        Python block is fed to the venv's ``python`` by :meth:`PageRun.run`)."""
        if self.lang != "console":
            return self.code
        lines, continued = [], False
        for line in self.code.splitlines():
            if line.startswith("$ ") or continued:
                lines.append(line[2:] if line.startswith("$ ") else line)
                continued = line.endswith("\\")
        return "\n".join(lines) + "\n"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with the marker comment just before it, if any."""
    out: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    section, i = "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        match = _FENCE.match(line)
        if not match:
            i += 1
            continue
        indent, fence, lang = match.group(1), match.group(2), match.group(3).lower()
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            text = lines[i]
            body.append(text[len(indent):] if text.startswith(indent) else text.lstrip())
            i += 1
        i += 1  # the closing fence
        block = Block(page, start + 1, lang, "\n".join(body) + "\n", section=section)
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        # the comments right before the block (several may stand one above the other)
        while j >= 0 and lines[j].strip().startswith("<!--") and lines[j].strip().endswith("-->"):
            comment = lines[j].strip()
            if (m := _NOT_RUN.match(comment)) is not None:
                block.not_run = m.group(1).strip()
            elif (m := _NEEDS.match(comment)) is not None:
                block.needs += m.group(1).split()
            elif _AFTER_CTRL_C.match(comment):
                block.stop_serve = True
            j -= 1
        out.append(block)
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_PRELUDE = r"""
set -eo pipefail
stb_alive() {  # running, and not a zombie waiting for its parent
  [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" != Z ]
}
stb_serve_bg() {
  if [ -s "$STB_DOCS_DIR/serve.pid" ]; then
    local old; old=$(cat "$STB_DOCS_DIR/serve.pid")
    kill "$old" 2>/dev/null || true
    while stb_alive "$old"; do sleep 0.05; done
    : > "$STB_DOCS_DIR/serve.pid"
  fi
  local log="$STB_DOCS_DIR/serve-$(date +%s%N).log"
  : > "$log"
  stbproxy serve "$@" >"$log" 2>&1 &
  local pid=$!
  echo "$pid" > "$STB_DOCS_DIR/serve.pid"
  for _ in $(seq 1200); do
    if grep -q '^stbproxy .* listening on ' "$log"; then cat "$log"; return 0; fi
    if ! stb_alive "$pid"; then
      cat "$log" >&2; echo "(stbproxy serve ended before it was ready)" >&2; : > "$STB_DOCS_DIR/serve.pid"; return 1
    fi
    sleep 0.05
  done
  cat "$log" >&2; echo "(stbproxy serve was not ready within 60 s)" >&2; return 1
}
"""


class PageRun:
    """A work folder, its environment and the processes a page's blocks started."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None, ports: dict[str, int] | None = None,
                 replace: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.control = folder / ".docs-run"
        self.control.mkdir(parents=True, exist_ok=True)
        self.ports = ports or {p: free_port() for p in ("8080", "8081", "8000", "6379")}
        self.replace = replace or {}
        home = folder / ".home"
        home.mkdir(exist_ok=True)
        inherited = {k: v for k, v in os.environ.items()
                     if not k.lower().endswith("_proxy") and not k.startswith(("STBPROXY_", "OPENAI_"))}
        self.env = {**inherited, "HOME": str(home), "STB_DOCS_DIR": str(self.control),
                    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                    "STBPROXY_SERVE_PORT": str(self.ports["8080"]), "STBPROXY_ENV_PORT": str(self.ports["8080"]),
                    "STBPROXY_RUN_PORT": str(self.ports["8080"]),
                    "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
        self.groups: list[int] = []

    def text(self, code: str) -> str:
        for port, free in self.ports.items():
            code = re.sub(rf"(?<![\d.]){port}(?!\d)", str(free), code)
        for old, new in self.replace.items():
            code = code.replace(old, new)
        return code

    def write_file(self, block: Block) -> Path:
        path = self.folder / block.file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.text(block.code), encoding="utf-8")
        return path

    def run(self, block: Block, timeout: float = 120) -> subprocess.CompletedProcess:
        if block.stop_serve:
            self.stop_serve()
        if block.is_python:
            # as a reader runs a snippet in the folder: `python` on stdin, so the folder is on sys.path
            source = self.control / f"block-{block.line}.py"
            source.write_text(self.text(block.code), encoding="utf-8")
            script = _PRELUDE + f'python - < "$STB_DOCS_DIR/{source.name}"\n'
        else:
            script = _PRELUDE + _SERVE.sub(r"\1stb_serve_bg", self.text(block.script()))
        process = subprocess.Popen(["bash", "-c", script], cwd=self.folder, env=self.env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
        self.groups.append(process.pid)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_group(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            output += f"\n(timed out after {timeout} s)"
        return subprocess.CompletedProcess(script, process.returncode, output, "")

    def stop_serve(self) -> None:
        """Stop the proxy a ``stbproxy serve`` line left running (as Ctrl-C would)."""
        pid_file = self.control / "serve.pid"
        if pid_file.exists() and pid_file.read_text().strip():
            pid = int(pid_file.read_text())
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            _wait_gone(pid, 15)
            pid_file.write_text("")

    def close(self) -> None:
        """Stop the proxy a ``stbproxy serve`` line left running, then every background job."""
        self.stop_serve()
        for group in self.groups:
            self._kill_group(group, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for group in self.groups:
            while time.monotonic() < deadline and _group_alive(group):
                time.sleep(0.05)
            self._kill_group(group, signal.SIGKILL)

    @staticmethod
    def _kill_group(group: int, sig: int) -> None:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def missing_needs(block: Block, python: str = sys.executable) -> str | None:
    """Why the block cannot run here (a command or Python module it needs is missing), or None."""
    import importlib.util
    import shutil

    for need in block.needs:
        if shutil.which(need):
            continue
        if importlib.util.find_spec(need) is not None:
            continue
        return f"{block.where} needs {need}, which is neither a command on PATH nor an installed Python module"
    return None


_IMPORT_CHECK = r"""
import ast, importlib, sys
tree = ast.parse(sys.stdin.read())
for node in ast.walk(tree):
    if isinstance(node, ast.Import):
        for alias in node.names:
            importlib.import_module(alias.name)
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
        module = importlib.import_module(node.module)
        for alias in node.names:
            if alias.name != "*" and not hasattr(module, alias.name):
                importlib.import_module(f"{node.module}.{alias.name}")  # a submodule, or ImportError
"""


def import_problems(block: Block, python: str = sys.executable) -> str | None:
    """Compile a Python block and import what it imports (every ``import`` and ``from ...
    import NAME`` anywhere in it, each name included), without running the rest; what
    failed, or None. Run in a fresh interpreter, so nothing this process imported helps."""
    try:
        compile(block.code, block.where, "exec")
    except SyntaxError as exc:
        return f"{block.where}: does not compile: {exc}"
    import tempfile

    with tempfile.TemporaryDirectory() as empty:  # the working folder adds nothing to sys.path
        result = subprocess.run([python, "-c", _IMPORT_CHECK], input=block.code, capture_output=True, text=True,
                                cwd=empty, timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if result.returncode != 0:
        last = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return f"{block.where}: its imports fail: {last[0]}"
    return None
