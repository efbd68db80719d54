"""A curl command line read as data: never run, never given to a shell.

Execution-scored tasks (``stbproxy eval exec``) take the first line of a model's
generation that begins with ``curl``. That text is untrusted, so this module reads it
into a :class:`CurlRequest` and refuses, with one reason, whatever a shell or curl would
do beyond one HTTP request: shell syntax (``;``, ``|``, ``&``, redirections, ``$(...)``,
``$VAR``, backticks), options that read or write local files (``-o``, ``-O``, ``-K``,
``-T``, ``@file`` data, ``-b FILE``, certificates, ...), options of its own routing
(``-x``, ``--unix-socket``), any scheme but http(s), several URLs and curl's own URL
globbing. An option not listed here is refused too: what is accepted is a list, not a
guess. Splitting is shlex's (POSIX rules), after a scan that finds the shell syntax a
shell would act on and cuts a trailing ``# comment``, as a shell would.

Pure: no I/O. Which hosts a task allows, its key and its profile's rules are applied by
the caller (exec_run.py).
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass, field, replace
from urllib.parse import quote, urlsplit

PLACEHOLDER = "{API_KEY}"


class Refused(ValueError):
    """A command that is not executed here; the message says why, in one line."""


@dataclass(frozen=True)
class CurlRequest:
    """What a curl command would send, and what it would print."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    follow_redirects: bool = False  # -L
    include_headers: bool = False  # -i, -I: the output starts with the answer's head (not JSON)
    fail_on_error: bool = False  # -f: an HTTP status of 400 or more prints nothing and fails
    max_time: float | None = None  # -m SECONDS
    options: tuple[str, ...] = field(default=())  # the options read, as written (for reports)

    def header(self, name: str) -> str | None:
        lower = name.lower()
        return next((v for k, v in self.headers if k.lower() == lower), None)

    def with_header(self, name: str, value: str | None) -> CurlRequest:
        """This request with ``name`` set to ``value`` (removed when None), in place of any
        header of that name."""
        kept = tuple((k, v) for k, v in self.headers if k.lower() != name.lower())
        return replace(self, headers=kept + (((name, value),) if value is not None else ()))

    @property
    def host(self) -> str:
        return host_of(self.url)


def host_of(url: str) -> str:
    """``host`` or ``host:port`` (lower-case; the scheme's default port dropped)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        return host
    if port is None or (parts.scheme, port) in (("http", 80), ("https", 443)):
        return host
    return f"{host}:{port}"


def first_curl_line(generation: str) -> str | None:
    """The first line that begins with ``curl`` (after indentation), as ToolBench takes it."""
    for line in generation.splitlines():
        stripped = line.strip()
        if stripped == "curl" or (stripped.startswith("curl") and stripped[4:5].isspace()):
            return stripped
    return None


# -- the shell's syntax, found without a shell ----------------------------------------------------

_OPERATORS = set(";&|<>()")
_EXPANSION_START = re.compile(r"[A-Za-z_0-9{(@*#?$!-]")


def _shell_words(line: str) -> list[str]:
    """The words a POSIX shell would give curl, or Refused naming the first piece of
    shell syntax that a shell would act on (it is never acted on here)."""
    quote_char = ""
    i, n = 0, len(line)
    word_start = True
    while i < n:
        c = line[i]
        if quote_char == "'":
            if c == "'":
                quote_char = ""
        elif quote_char == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                quote_char = ""
            elif c == "`":
                raise Refused("shell syntax: a backtick command substitution (not run here)")
            elif c == "$" and _EXPANSION_START.match(line, i + 1):
                raise Refused(f"shell syntax: the expansion {line[i:i + 2]}... (not run here)")
        else:
            if c == "\\":
                i += 1
            elif c in "'\"":
                quote_char = c
            elif c == "#" and word_start:
                line = line[:i]  # a comment, as the shell reads it
                break
            elif c in _OPERATORS:
                raise Refused(f"shell syntax: {c!r} outside quotes (a shell would act on it; not run here)")
            elif c == "`":
                raise Refused("shell syntax: a backtick command substitution (not run here)")
            elif c == "$" and _EXPANSION_START.match(line, i + 1):
                raise Refused(f"shell syntax: the expansion {line[i:i + 2]}... (not run here)")
            elif c == "\n":
                raise Refused("shell syntax: a second line")
        word_start = quote_char == "" and c.isspace()
        i += 1
    if quote_char:
        raise Refused(f"unbalanced {quote_char} quote")
    try:
        return shlex.split(line, comments=False, posix=True)
    except ValueError as exc:  # a trailing backslash
        raise Refused(f"cannot be split into words ({exc})") from None


# -- curl's options -------------------------------------------------------------------------------

# Options that read or write a local file (or standard input), refused with that reason.
_FILE_OPTIONS = {
    "-o": "--output", "-O": "--remote-name", "-K": "--config", "-T": "--upload-file", "-c": "--cookie-jar",
    "-D": "--dump-header", "-E": "--cert", "-J": "--remote-header-name", "-n": "--netrc",
}
_FILE_LONG = {
    "--output", "--remote-name", "--remote-name-all", "--config", "--upload-file", "--cookie-jar",
    "--dump-header", "--cert", "--key", "--cacert", "--capath", "--crlfile", "--pinnedpubkey", "--netrc",
    "--netrc-file", "--netrc-optional", "--trace", "--trace-ascii", "--stderr", "--libcurl", "--output-dir",
    "--create-dirs", "--etag-save", "--etag-compare", "--hsts", "--alt-svc", "--remote-header-name",
    "--proxy-cacert", "--proxy-capath", "--proxy-cert", "--proxy-key", "--unix-socket", "--abstract-unix-socket",
    "--random-file", "--egd-file", "--ssl-sessions", "--variable", "--expand-url",
}
# Options of the command's own routing: the proxy chooses the route.
_ROUTE_LONG = {"--proxy", "--socks4", "--socks4a", "--socks5", "--socks5-hostname", "--preproxy", "--connect-to",
               "--resolve", "--interface", "--dns-servers", "--proxy-user", "--noproxy"}
_ROUTE_SHORT = {"-x": "--proxy", "-U": "--proxy-user"}

# Accepted options: long name -> takes a value. Short forms map to these.
_VALUED = {"--request", "--header", "--data", "--data-raw", "--data-ascii", "--data-binary", "--data-urlencode",
           "--json", "--url", "--user", "--user-agent", "--referer", "--cookie", "--max-time", "--connect-timeout",
           "--retry", "--retry-delay", "--retry-max-time", "--write-out", "--form", "--form-string"}
_FLAGS = {"--get", "--silent", "--show-error", "--location", "--compressed", "--insecure", "--include", "--head",
          "--fail", "--fail-with-body", "--verbose", "--globoff", "--http1.1", "--http1.0", "--http2",
          "--no-buffer", "--no-progress-meter", "--progress-bar", "--location-trusted", "--retry-connrefused",
          "--retry-all-errors", "--tlsv1.2", "--tlsv1.3", "--ipv4", "--ipv6", "--no-keepalive", "--path-as-is"}
_SHORT = {"-X": "--request", "-H": "--header", "-d": "--data", "-G": "--get", "-s": "--silent",
          "-S": "--show-error", "-L": "--location", "-k": "--insecure", "-i": "--include", "-I": "--head",
          "-f": "--fail", "-v": "--verbose", "-g": "--globoff", "-u": "--user", "-A": "--user-agent",
          "-e": "--referer", "-b": "--cookie", "-m": "--max-time", "-w": "--write-out", "-F": "--form",
          "-0": "--http1.0", "-N": "--no-buffer", "-4": "--ipv4", "-6": "--ipv6", "-#": "--progress-bar"}

_DATA = {"--data", "--data-raw", "--data-ascii", "--data-binary", "--data-urlencode", "--json"}
_GLOB = re.compile(r"[{}\[\]]")
_WHITESPACE_FORMAT = re.compile(r"^(?:\s|\\[nrt])*$")


def _long_name(option: str) -> str:
    if option in _FILE_OPTIONS or option in _FILE_LONG:
        raise Refused(f"{option} reads or writes a local file")
    if option in _ROUTE_SHORT or option in _ROUTE_LONG:
        raise Refused(f"{option} chooses a route of its own (the proxy is the route)")
    if option.startswith("--"):
        if option in _VALUED or option in _FLAGS:
            return option
        raise Refused(f"unsupported curl option {option.split('=', 1)[0]}")
    if option in _SHORT:
        return _SHORT[option]
    raise Refused(f"unsupported curl option {option}")


def _options(words: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The options (long name, value; "" for a flag) and the URLs, in order."""
    options: list[tuple[str, str]] = []
    urls: list[str] = []
    i = 0
    only_urls = False
    while i < len(words):
        word = words[i]
        i += 1
        if only_urls or not word.startswith("-") or word == "-":
            urls.append(word)
            continue
        if word == "--":
            only_urls = True
            continue
        if word.startswith("--"):
            name = _long_name(word)
            if name in _VALUED:
                if i >= len(words):
                    raise Refused(f"{word} needs a value")
                options.append((name, words[i]))
                i += 1
            else:
                options.append((name, ""))
            continue
        # Short options, possibly clustered (-sSL) or with their value attached (-XPOST).
        j = 1
        while j < len(word):
            name = _long_name(f"-{word[j]}")
            j += 1
            if name in _VALUED:
                if j < len(word):
                    value = word[j:]
                elif i < len(words):
                    value = words[i]
                    i += 1
                else:
                    raise Refused(f"-{word[j - 1]} needs a value")
                options.append((name, value))
                break
            options.append((name, ""))
    return options, urls


def _data_part(name: str, value: str) -> str:
    """One -d/--data* value as curl puts it in the body (files refused)."""
    if name == "--data-raw":
        return value
    if name == "--data-urlencode":
        equals, at = value.find("="), value.find("@")
        if at != -1 and (equals == -1 or at < equals):  # @file or name@file
            raise Refused(f"{name} {value[:40]!r} reads a local file")
        if "=" in value:
            key, content = value.split("=", 1)
            return (f"{key}=" if key else "") + quote(content, safe="")
        return quote(value, safe="")
    if value.startswith("@"):
        raise Refused(f"{name} {value[:40]!r} reads a local file" + (" (standard input)" if value == "@-" else ""))
    return value


def parse_curl(line: str) -> CurlRequest:
    """The request a curl command line would make; Refused (with its reason) for one that
    is not executed here. The URL's host is not checked here (the task's rule)."""
    words = _shell_words(line)
    if not words or words[0] != "curl":
        raise Refused("not a curl command")
    options, urls = _options(words[1:])
    method: str | None = None
    headers: list[tuple[str, str]] = []
    data: list[str] = []
    content_type: str | None = None
    get = head = include = follow = fail = globoff = False
    max_time: float | None = None
    for name, value in options:
        if name == "--url":
            urls.append(value)
        elif name == "--request":
            method = value.strip().upper()
            if not re.fullmatch(r"[A-Z]+", method):
                raise Refused(f"-X {value!r} is not an HTTP method")
        elif name == "--header":
            if ":" not in value:
                if value and value.startswith("@"):
                    raise Refused(f"-H {value[:40]!r} reads a local file")
                raise Refused(f"-H {value!r} is not 'Name: value'")
            key, text = value.split(":", 1)
            if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", key.strip()):
                raise Refused(f"-H {value[:40]!r}: not a header name")
            headers = [(k, v) for k, v in headers if k.lower() != key.strip().lower()]
            if text.strip():  # "Name:" takes a header out, as curl does
                headers.append((key.strip(), text.strip()))
        elif name in _DATA:
            data.append(_data_part(name, value))
            if name == "--json":
                content_type = "application/json"
                headers.append(("Accept", "application/json"))
        elif name in ("--form", "--form-string"):
            if name == "--form" and re.search(r"=[@<]", value):
                raise Refused(f"-F {value[:40]!r} reads a local file")
            raise Refused(f"{name} (a multipart form) is not supported")
        elif name == "--get":
            get = True
        elif name == "--head":
            head = include = True
        elif name == "--include":
            include = True
        elif name in ("--location", "--location-trusted"):
            follow = True
        elif name in ("--fail", "--fail-with-body"):
            fail = True  # the command fails on a status of 400 or more
        elif name == "--globoff":
            globoff = True
        elif name == "--user":
            user = value
            if ":" not in user:
                raise Refused("-u without a password (curl would prompt for one)")
            headers.append(("Authorization", "Basic " + base64.b64encode(user.encode()).decode("ascii")))
        elif name == "--user-agent":
            headers.append(("User-Agent", value))
        elif name == "--referer":
            headers.append(("Referer", value))
        elif name == "--cookie":
            if "=" not in value:
                raise Refused(f"-b {value[:40]!r} reads a local cookie file")
            headers.append(("Cookie", value))
        elif name == "--max-time":
            try:
                max_time = float(value)
            except ValueError:
                raise Refused(f"-m {value!r} is not a number of seconds") from None
        elif name == "--write-out":
            if value.startswith("@"):
                raise Refused(f"-w {value[:40]!r} reads a local file")
            if not _WHITESPACE_FORMAT.match(value):
                raise Refused("-w with variables is not supported (it would change the output)")
        # the rest (-s, -S, -k, -v, --compressed, --retry, --http1.1, ...) change nothing that is printed
    if not urls:
        raise Refused("no URL")
    if len(urls) > 1:
        raise Refused(f"{len(urls)} URLs (curl would print their answers one after the other)")
    url = urls[0]
    if "://" not in url.split("?", 1)[0]:
        url = "http://" + url  # curl's guess for a URL without a scheme
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise Refused(f"the scheme {scheme}:// (only http and https are executed)")
    parts = urlsplit(url)
    if not parts.hostname:
        raise Refused("the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise Refused("credentials in the URL are not supported")
    if not globoff and _GLOB.search(url.replace(PLACEHOLDER, "")):
        raise Refused("curl would expand {...} or [...] in the URL (URL globbing; not done here)")
    body: bytes | None = None
    if data:
        joined = "&".join(data)
        if get:
            url += ("&" if parts.query else "?") + joined
        else:
            body = joined.encode("utf-8")
            if content_type is None and not any(k.lower() == "content-type" for k, _ in headers):
                content_type = "application/x-www-form-urlencoded"
    if content_type and not any(k.lower() == "content-type" for k, _ in headers):
        headers.append(("Content-Type", content_type))
    if method is None:
        method = "HEAD" if head else ("POST" if body is not None else "GET")
    return CurlRequest(method, url, tuple(headers), body, follow, include, fail, max_time,
                       tuple(name for name, _ in options))


def with_key(request: CurlRequest, key: str | None) -> CurlRequest:
    """``{API_KEY}`` replaced by ``key`` (by nothing when there is none) in the URL, the
    headers and the body. The key is put in only here, after the command was read, so
    that no message about the command can hold it."""
    value = key or ""
    if PLACEHOLDER not in request.url and not any(PLACEHOLDER in v for _, v in request.headers) and not (
            request.body and PLACEHOLDER.encode() in request.body):
        return request
    return replace(request, url=request.url.replace(PLACEHOLDER, quote(value, safe="")),
                   headers=tuple((k, v.replace(PLACEHOLDER, value)) for k, v in request.headers),
                   body=request.body.replace(PLACEHOLDER.encode(), value.encode()) if request.body else request.body)
