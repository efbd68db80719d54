"""The addon inside mitmproxy's own test harness (taddons / tflow)."""

import asyncio
import json

import pytest
from mitmproxy import exceptions
from mitmproxy.test import taddons, tflow, tutils

from stbproxy.mitm import StbAddon, request_from_flow, response_to_mitm
from stbproxy.models import Response


def flow_for(url: str, method: str = "GET", headers=(), body: bytes = b""):
    flow = tflow.tflow()
    flow.request = tutils.treq()
    flow.request.method = method
    flow.request.url = url
    for name, value in headers:
        flow.request.headers[name] = value
    flow.request.content = body
    return flow


def test_options_are_validated_with_the_option_name(tmp_path):
    addon = StbAddon()
    with taddons.context(addon) as tctx:
        with pytest.raises(exceptions.OptionsError, match="stb_mode"):
            tctx.configure(addon, stb_mode="sometimes")
        with pytest.raises(exceptions.OptionsError, match="stb_upstream_timeout"):
            tctx.configure(addon, stb_upstream_timeout="soon")
        with pytest.raises(exceptions.OptionsError, match="stb_max_body"):
            tctx.configure(addon, stb_max_body=-1)
        with pytest.raises(exceptions.OptionsError, match="stb_upstream_ca"):
            tctx.configure(addon, stb_upstream_ca=str(tmp_path / "missing.pem"))


def test_store_opens_only_when_running(tmp_path):
    addon = StbAddon()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, stb_store=str(tmp_path / "s"), stb_mode="replay", stb_allow_empty=True)
        assert addon.runtime is None and not (tmp_path / "s").exists()
        addon.running()
        assert addon.runtime is not None and (tmp_path / "s" / "CURRENT").exists()
        asyncio.run(addon.done())


def test_record_then_replay_through_the_addon(tmp_path, upstream):
    async def scenario():
        addon = StbAddon()
        with taddons.context(addon) as tctx:
            tctx.configure(addon, stb_store=str(tmp_path / "s"), stb_mode="record")
            recorded = flow_for(upstream.url("/echo?x=1"))
            await addon.request(recorded)
            tctx.configure(addon, stb_mode="replay")  # reopens the same store
            replayed = flow_for(upstream.url("/echo?x=1"))
            await addon.request(replayed)
            missed = flow_for(upstream.url("/echo?x=2"))
            await addon.request(missed)
            await addon.done()
        return recorded, replayed, missed

    recorded, replayed, missed = asyncio.run(scenario())
    assert recorded.response.headers["X-Stb-Source"] == "upstream" and recorded.metadata["stb_source"] == "upstream"
    assert replayed.response.headers["X-Stb-Source"] == "cache"
    assert replayed.response.content == recorded.response.content
    assert missed.response.status_code == 404
    assert upstream.hits["/echo"] == 1


def test_a_flow_already_answered_is_left_alone(tmp_path):
    async def scenario():
        addon = StbAddon()
        with taddons.context(addon) as tctx:
            tctx.configure(addon, stb_store=str(tmp_path / "s"))
            flow = tflow.tflow(resp=True)
            before = flow.response.content
            await addon.request(flow)
            await addon.done()
            return before, flow

    before, flow = asyncio.run(scenario())
    assert flow.response.content == before and "stb_source" not in flow.metadata


def test_requests_to_the_proxy_itself_are_not_forwarded(tmp_path):
    async def scenario():
        addon = StbAddon()
        with taddons.context(addon) as tctx:
            tctx.configure(addon, stb_store=str(tmp_path / "s"))
            flow = flow_for("http://127.0.0.1:8080/anything")
            flow.client_conn.sockname = ("127.0.0.1", 8080)
            await addon.request(flow)
            await addon.done()
            return flow

    flow = asyncio.run(scenario())
    assert flow.response.status_code == 404
    assert "HTTP_PROXY" in json.loads(flow.response.content)["error"]


def test_conversions_keep_repeated_headers_and_bytes():
    flow = flow_for("https://h.example/p?q=1", "POST", body=b"\x00\xff")
    flow.request.headers.add("X-Multi", "a")
    flow.request.headers.add("X-Multi", "b")
    request = request_from_flow(flow)
    assert request.url == "https://h.example/p?q=1" and request.body == b"\x00\xff"
    assert [v for k, v in request.headers if k == "X-Multi"] == ["a", "b"]
    converted = response_to_mitm(Response(201, (("X-A", "1"), ("X-A", "2")), b"body"))
    assert converted.status_code == 201 and converted.headers.get_all("X-A") == ["1", "2"]
    assert converted.headers["content-length"] == "4"


@pytest.mark.parametrize("options,named", [
    ({"stb_validity": "lenient"}, "stb_validity"),
    ({"stb_simulator": "oracle"}, "stb_simulator"),
    ({"stb_sim_concurrency": 0}, "stb_sim_concurrency"),
    ({"stb_faults": ["status=999"]}, "stb_faults"),
    ({"stb_session": "../x"}, "stb_session"),
    ({"stb_keep_status": ["404,500"]}, "stb_keep_status"),
])
def test_settings_errors_name_their_option(tmp_path, options, named):
    addon = StbAddon()
    with taddons.context(addon) as tctx:
        with pytest.raises(exceptions.OptionsError, match=f"^{named}: "):
            tctx.configure(addon, stb_store=str(tmp_path / "s"), **options)


def test_keep_status_travels_from_the_option_to_the_engine(tmp_path):
    addon = StbAddon()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, stb_store=str(tmp_path / "s"), stb_keep_status=["410,404", "451"])
        assert addon.settings.keep_status == (404, 410, 451)
        assert addon.settings.engine_config().keep_status == frozenset({404, 410, 451})


def test_a_failure_before_the_options_are_read_is_logged_with_its_secrets_scrubbed(caplog):
    addon = StbAddon()
    assert addon.settings is None  # no options read yet: the default key rules apply
    request = request_from_flow(flow_for("http://api.example/v1?api_key=hush-123&q=weather"))
    try:
        raise RuntimeError(f"boom near {request.url}")  # (the traceback quotes this line: no secret in it)
    except RuntimeError as exc:
        with caplog.at_level("ERROR", logger="stbproxy"):
            addon.log_failure(request, exc)
    assert "stbproxy failed on GET" in caplog.text and "RuntimeError" in caplog.text
    assert "hush-123" not in caplog.text and "q=weather" in caplog.text
