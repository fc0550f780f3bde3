"""A local application's token is kept out of its APP_PATH, and the CLI pins its admin API's TLS.

Every container is told APP_PATH; the token lives under ``$STRAM_HOME/secrets``.
The launch records whether the admin API serves TLS, and the CLI never sends the
token over ``http://`` to an application launched with it, whatever ``admin.json``
says; ``get-app-info`` says when it shows a stale ``status.json``.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import ROOT

from stram.client import cli, commands
from stram.common import apps
from stram.common.errors import StramError


def test_a_local_launch_keeps_its_token_out_of_app_path_and_pins_tls(tmp_path, monkeypatch, capsys):
    """Every container is told APP_PATH: the application's token is not there. The launch records
    whether the admin API serves TLS, and the CLI never sends the token over http:// to one that does,
    whatever admin.json says."""
    monkeypatch.setenv("STRAM_HOME", str(tmp_path))
    monkeypatch.chdir(ROOT)
    out = tmp_path / "out"
    assert cli.main(["launch", "specs/wordcount.yaml", "-D", f"operators.out.path={out}", "-D", "TLS=true"]) == 0
    (app,) = apps.local_apps()
    assert app["state"] == "SUCCEEDED"
    assert not [p for p in os.listdir(app["app_path"]) if "token" in p]
    assert apps.read_token(app["id"]) and apps.pinned_tls(app["id"]) is True
    # admin.json rewritten to plain http (as if by someone else): the call is refused before any byte is sent
    forged = dict(app, state="RUNNING", admin_url="http://127.0.0.1:9/")
    with pytest.raises(StramError, match="launched with TLS.*refusing to send its token without TLS"):
        commands.admin(forged, "info")
    info = commands.app_info(forged)  # what get-app-info shows: the last status, saying it is stale
    assert info["state"] == "RUNNING" and "did not answer" in info["stale"] and "last status.json" in info["stale"]
    capsys.readouterr()
    json.dumps(info)  # serializable for --json
