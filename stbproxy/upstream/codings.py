"""An answer's content codings undone, bounded (``UpstreamConfig.max_body``): gzip and
deflate by zlib, br and zstd by their libraries where installed, in any stack of at most
MAX_CODINGS, each step making at most a bounded piece, so a compression bomb stops
inflating at the limit. Which codings a request may offer (``accepted_codings``) follows
from which can be undone here."""

from __future__ import annotations

import zlib
from types import ModuleType
from typing import Callable, Iterable, Iterator, Protocol

import httpx

from stbproxy.errors import UpstreamError, UpstreamFailure

try:  # installed with mitmproxy, as httpx finds them
    import brotli
except ImportError:  # pragma: no cover
    brotli = None
zstandard: ModuleType | None
try:
    import zstandard
except ImportError:  # pragma: no cover
    zstandard = None

MAX_CODINGS = 5  # a longer stack of codings is refused (as urllib3 does)
PIECE = 64 * 1024  # the most one step of gzip or deflate inflates


class OverLimit(Exception):
    """A coding made more than the limit (its name is the message)."""


class _Decoder(Protocol):
    """One coding undone: pieces in, what they make out; ``flush`` at the body's end."""

    def feed(self, data: bytes) -> Iterable[bytes]: ...

    def flush(self) -> Iterable[bytes]: ...


class _Inflate:
    """gzip and x-gzip (every member, as gzip concatenates them) or deflate (zlib-wrapped as
    RFC 9110 says, or raw as some servers send it), PIECE bytes at most per step: zlib's
    own bound, so a bomb never inflates further than the limit."""

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self._inflate = None  # made once two bytes tell which kind of stream follows
        self._streams = 0
        self._held = b""  # fewer than two bytes of a stream's start
        self._more = False  # zlib may hold output that the last step had no room for
        self._ended = False  # what follows the (last) stream is ignored

    def _start(self, first: bytes):
        self._streams += 1
        if self._gzip:  # a further member starts with gzip's magic; anything else is trailing junk
            return zlib.decompressobj(16 + zlib.MAX_WBITS) if self._streams == 1 or first == b"\x1f\x8b" else None
        if self._streams > 1:
            return None
        zlib_header = first[0] & 0x0F == 8 and int.from_bytes(first, "big") % 31 == 0
        return zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        data, self._held = self._held + data, b""
        while (data or self._more) and not self._ended:
            if self._inflate is None:
                if len(data) < 2:
                    self._held = data
                    return
                self._inflate = self._start(data[:2])
                if self._inflate is None:
                    self._ended = True
                    return
            try:
                out = self._inflate.decompress(data, PIECE)
            except zlib.error as exc:
                raise httpx.DecodingError(f"{'gzip' if self._gzip else 'deflate'}: {exc}") from None
            data, self._more = self._inflate.unconsumed_tail, len(out) == PIECE
            if out:
                yield out
            if self._inflate.eof:
                data, self._inflate, self._more = self._inflate.unused_data + data, None, False

    def flush(self) -> Iterable[bytes]:
        if self._inflate is not None or (self._held and not self._streams):
            raise httpx.DecodingError(f"the {'gzip' if self._gzip else 'deflate'} body ends before its stream does")
        return ()


class _Sliced:
    """brotli and zstd, whose libraries take no bound on what one call makes: they are fed a
    few bytes at a time, which bounds each step (zstd: 4 bytes may make a 128 KiB block, so
    256 make at most 8 MiB; brotli: 16 bytes hold at most a meta-block or two, 16 MiB each)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._step = 16 if name == "br" else 256
        self._decoder = self._new()
        self._seen = False

    def _new(self):
        if self._name == "br":
            return brotli.Decompressor()
        return zstandard.ZstdDecompressor(max_window_size=8 << 20).decompressobj()  # RFC 9659's window

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._seen = self._seen or bool(data)
        step = self._step
        try:
            for at in range(0, len(data), step):
                out = self._process(data[at:at + step])
                if out:
                    yield out
        except _LIBRARY_ERRORS as exc:
            raise httpx.DecodingError(f"{self._name}: {exc}") from None

    def _process(self, data: bytes) -> bytes:
        if self._name == "br":
            return self._decoder.process(data)
        if self._decoder.eof:  # a frame ended with the last piece: the next one starts here
            self._decoder = self._new()
        out = self._decoder.decompress(data)
        while self._decoder.eof and self._decoder.unused_data:  # frames one after another
            rest, self._decoder = self._decoder.unused_data, self._new()
            out += self._decoder.decompress(rest)
        return out

    def flush(self) -> Iterable[bytes]:
        finished = self._decoder.is_finished() if self._name == "br" else self._decoder.eof
        if self._seen and not finished:
            raise httpx.DecodingError(f"the {self._name} body ends before its stream does")
        return ()


_LIBRARY_ERRORS = tuple(error for error in (getattr(brotli, "error", None), getattr(zstandard, "ZstdError", None))
                        if error is not None)
_DECODERS: dict[str, Callable[[], _Decoder] | None] = {
    "identity": None, "gzip": lambda: _Inflate(True), "x-gzip": lambda: _Inflate(True),
    "deflate": lambda: _Inflate(False)}
if brotli is not None:
    _DECODERS["br"] = lambda: _Sliced("br")
if zstandard is not None:
    _DECODERS["zstd"] = lambda: _Sliced("zstd")


def accepted_codings(value: str) -> str:
    """A client's Accept-Encoding as sent upstream: only the codings decoded here (a server
    would otherwise be free to answer in one that cannot be read); ``identity`` if none is left."""
    kept = [item.strip() for item in value.split(",")
            if item.split(";", 1)[0].strip().lower() in _DECODERS]
    return ", ".join(kept) or "identity"


def answer_codings(reply: httpx.Response, url: str) -> list[str]:
    """The answer's codings in the order they were applied; UpstreamError (``undecodable``)
    when one of them is not decoded here or there are too many."""
    codings = [c.strip().lower() for value in reply.headers.get_list("content-encoding")
               for c in value.split(",") if c.strip()]
    unknown = [c for c in codings if c not in _DECODERS]
    if unknown or len(codings) > MAX_CODINGS:
        known = ", ".join(_DECODERS)
        why = (f"{unknown[0]!r} is not a coding this proxy decodes ({known})" if unknown
               else f"this proxy decodes at most {MAX_CODINGS} codings one over another")
        raise UpstreamError(f"the upstream answered with Content-Encoding {', '.join(codings)!r}: {why}; "
                            f"the answer was not passed on or stored: {url}", failure=UpstreamFailure.UNDECODABLE)
    return codings


class Decoding:
    """An answer's codings undone, last applied first, one bounded piece at a time; OverLimit
    when any of them has made more than ``limit`` bytes (None: no limit, an event stream)."""

    def __init__(self, codings: list[str], limit: int | None) -> None:
        makers = [_DECODERS[c] for c in reversed(codings)]
        self._stages = [make() for make in makers if make is not None]  # (only identity has none)
        self._names = [c for c in reversed(codings) if c != "identity"]
        self._made = [0] * len(self._stages)
        self._limit = limit

    def feed(self, data: bytes) -> Iterable[bytes]:
        if not data:
            return ()
        return self._through(0, (data,)) if self._stages else (data,)

    def flush(self) -> Iterator[bytes]:
        for at, stage in enumerate(self._stages):
            yield from self._through(at + 1, self._counted(at, stage.flush()))

    def _through(self, at: int, pieces: Iterable[bytes]) -> Iterator[bytes]:
        if at == len(self._stages):
            yield from pieces
            return
        for piece in pieces:
            yield from self._through(at + 1, self._counted(at, self._stages[at].feed(piece)))

    def _counted(self, at: int, pieces: Iterable[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            self._made[at] += len(piece)
            if self._limit is not None and self._made[at] > self._limit:
                raise OverLimit(self._names[at])
            yield piece
