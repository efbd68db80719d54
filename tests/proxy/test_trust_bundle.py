"""The client CA bundle: which roots it carries, and when and how it is (re)written."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import certifi
import pytest

from stbproxy import trust_bundle
from stbproxy.trust_bundle import write_client_bundle
from tests.servers import TestCA


@pytest.fixture
def ca(tmp_path) -> Path:
    """A stand-in for the proxy's CA certificate, in its own folder (the confdir)."""
    confdir = tmp_path / "conf"
    TestCA(confdir)
    return confdir / "test-ca.pem"


@pytest.fixture
def system_roots(tmp_path, monkeypatch) -> Path:
    """The system's roots file: one test CA, where OpenSSL's built-in default would be."""
    roots = TestCA(tmp_path / "system").ca_file
    defaults = ssl.get_default_verify_paths()
    monkeypatch.setattr(trust_bundle.ssl, "get_default_verify_paths",
                        lambda: defaults._replace(openssl_cafile=str(roots)))
    return roots


def certificates(path) -> set[str]:
    return {"".join(block.split()) for block in trust_bundle._certificates_in(Path(path))}


def test_the_bundle_holds_the_proxys_ca_and_the_system_roots(ca, system_roots):
    bundle = write_client_bundle(ca, environ={})
    assert bundle == ca.parent / "stbproxy-ca-bundle.pem"
    assert certificates(bundle) == certificates(ca) | certificates(system_roots)
    assert len(ssl.create_default_context(cafile=str(bundle)).get_ca_certs()) == 2
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o600


def test_without_a_system_file_the_roots_are_certifis(ca, tmp_path, monkeypatch):
    defaults = ssl.get_default_verify_paths()
    monkeypatch.setattr(trust_bundle.ssl, "get_default_verify_paths",
                        lambda: defaults._replace(openssl_cafile=str(tmp_path / "absent.pem")))
    bundle = write_client_bundle(ca, environ={})
    assert certificates(bundle) == certificates(ca) | certificates(certifi.where())


def test_roots_the_users_variables_named_are_kept_in_a_bundle_of_their_own(ca, system_roots, tmp_path):
    company = TestCA(tmp_path / "company").ca_file
    plain = write_client_bundle(ca, environ={})
    own = write_client_bundle(ca, environ={"REQUESTS_CA_BUNDLE": str(company), "SSL_CERT_FILE": str(system_roots)})
    assert own != plain and own.parent == plain.parent
    assert certificates(own) == certificates(ca) | certificates(system_roots) | certificates(company)
    assert certificates(plain) == certificates(ca) | certificates(system_roots)  # the other shell's, untouched


def test_env_run_again_in_the_same_shell_keeps_the_users_roots(ca, system_roots, tmp_path):
    company = TestCA(tmp_path / "company").ca_file
    first = write_client_bundle(ca, environ={"SSL_CERT_FILE": str(company)})
    # The shell now exports the bundle in every variable, and also the proxy's CA file as an
    # older stbproxy did.
    again = write_client_bundle(ca, environ={"SSL_CERT_FILE": str(first), "REQUESTS_CA_BUNDLE": str(first),
                                             "CURL_CA_BUNDLE": str(ca)})
    assert again == first
    assert certificates(again) == certificates(ca) | certificates(system_roots) | certificates(company)


def test_it_is_rewritten_only_when_the_ca_or_the_roots_change(ca, system_roots, tmp_path):
    bundle = write_client_bundle(ca, environ={})
    written = bundle.stat().st_ino
    assert write_client_bundle(ca, environ={}).stat().st_ino == written  # nothing changed: left alone
    system_roots.write_text(system_roots.read_text() + TestCA(tmp_path / "more").ca_file.read_text())
    assert write_client_bundle(ca, environ={}).stat().st_ino != written
    assert len(certificates(bundle)) == 3
    TestCA(ca.parent)  # a new CA in the confdir
    assert certificates(ca) <= certificates(write_client_bundle(ca, environ={}))
    assert [p.name for p in ca.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_damaged_or_missing_root_is_left_out_not_fatal(ca, system_roots, tmp_path):
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
                      + TestCA(tmp_path / "good").ca_file.read_text())
    bundle = write_client_bundle(ca, environ={"SSL_CERT_FILE": str(broken),
                                              "CURL_CA_BUNDLE": str(tmp_path / "gone.pem")})
    assert len(ssl.create_default_context(cafile=str(bundle)).get_ca_certs()) == 3
    assert "gone.pem" not in bundle.read_text()


def test_a_bundle_that_cannot_be_written_is_one_error_line(ca, system_roots):
    from click.testing import CliRunner

    from stbproxy.cli import main

    (ca.parent / "stbproxy-ca-bundle.pem").mkdir()  # in the way, whoever runs the test (root too)
    result = CliRunner().invoke(main, ["env", "--confdir", str(ca.parent)], env={
        "SSL_CERT_FILE": "", "REQUESTS_CA_BUNDLE": "", "CURL_CA_BUNDLE": ""})
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(f"stbproxy: error: cannot write the CA bundle in {ca.parent}: ")
    assert "--confdir" in result.output
